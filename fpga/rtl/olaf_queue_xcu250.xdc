## Timing constraints for olaf_queue on an AMD/Xilinx Alveo U250 (xcu250-figd2104-2L-e).
##
## The block sits inside a NIC / switch shell (behind a MAC or the Ethernet wrapper),
## so it is implemented out of context: its 512-bit streams never reach package pins
## (the U250 has far fewer user I/O than the ~1,250 ports). With Vivado:
##   read_verilog <the olaf_queue sources: fpga/tb/rtl_sources.py, QUEUE_SOURCES>
##   read_xdc -mode out_of_context fpga/rtl/olaf_queue_xcu250.xdc
##   synth_design -top olaf_queue -part xcu250-figd2104-2L-e -mode out_of_context
##   opt_design; place_design; route_design; report_timing_summary
## Not run here (no Vivado in this environment): the 4 ns target is met only in
## yosys's cell-delay STA on 7-series cells (fpga/README.md), not in a placed design.

# 250 MHz, the clock the throughput figures assume.
create_clock -period 4.000 -name clk [get_ports clk]
# Out-of-context: the clock arrives from a global buffer in the shell.
set_property HD.CLK_SRC BUFGCE_X0Y24 [get_ports clk]

# Ports are driven and sampled by registers of the surrounding shell, one routing
# hop away: budget 40 % of the period for the logic and wire outside the block.
set_input_delay  -clock clk -max 1.600 [get_ports -filter {DIRECTION == IN && NAME != clk}]
set_input_delay  -clock clk -min 0.100 [get_ports -filter {DIRECTION == IN && NAME != clk}]
set_output_delay -clock clk -max 1.600 [get_ports -filter {DIRECTION == OUT}]
set_output_delay -clock clk -min 0.000 [get_ports -filter {DIRECTION == OUT}]

# capacity, cluster / block bounds and frac_bits may change only while rst is high
# (held for >= 4 cycles); their registered copies settle within it.
set_multicycle_path -setup 4 -from [get_ports {cfg_capacity[*] cfg_max_clusters[*] cfg_max_blocks[*] cfg_frac_bits[*]}]
set_multicycle_path -hold  3 -from [get_ports {cfg_capacity[*] cfg_max_clusters[*] cfg_max_blocks[*] cfg_frac_bits[*]}]
# The counter read port feeds a slow register interface: these two lines assume the
# reader samples cnt_value two cycles after setting cnt_sel (drop them otherwise).
set_multicycle_path -setup 2 -from [get_ports {cnt_sel[*]}] -to [get_ports {cnt_value[*]}]
set_multicycle_path -hold  1 -from [get_ports {cnt_sel[*]}] -to [get_ports {cnt_value[*]}]
