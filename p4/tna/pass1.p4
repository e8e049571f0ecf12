/* Fragment of OlafIngress (TNA): the register tables of pass 1. They only read
 * (occupied, the index entry, the update's cluster's slot count, the entry's agg_count,
 * worker and reward, both ring pointers, the key of the slot at read_ptr), except that a
 * valid UPDATE or PULL takes the lock; each is pinned to its Register's stage (ingress.p4
 * has the plan). */

    action read_occupied() {
        md.occupied = occupied_read.execute(0);
    }
    @stage(0) table occupied_pass1 {
        actions = { read_occupied; }
        size = 1;
        default_action = read_occupied();
    }

    action read_index() {
        md.entry = index_read.execute(index_hash.get({hdr.olaf.cluster_id[3:0], hdr.olaf.block_id[9:0]}));
    }
    @stage(0) table index_pass1 {
        actions = { read_index; }
        size = 1;
        default_action = read_index();
    }

    /* For the cluster quota (DESIGN.md section 3 step 4): the slots the update's cluster
     * holds, compared with cluster_quota through the sign bit of quota_diff (decide.p4). */
    action read_cluster_slots() {
        md.cluster_slots = cluster_count_read.execute(cluster_hash.get({hdr.olaf.cluster_id[3:0]}));
    }
    @stage(0) table cluster_count_pass1 {
        actions = { read_cluster_slots; }
        size = 1;
        default_action = read_cluster_slots();
    }

    action read_slot_agg() {
        md.slot_agg = agg_read.execute(md.entry);
    }
    @stage(1) table agg_pass1 {
        actions = { read_slot_agg; }
        size = 1;
        default_action = read_slot_agg();
    }

    action read_slot_worker() {
        md.slot_worker = worker_read.execute(md.entry);
    }
    @stage(1) table worker_pass1 {
        actions = { read_slot_worker; }
        size = 1;
        default_action = read_slot_worker();
    }

    action read_slot_reward() {
        md.slot_reward = reward_read.execute(md.entry);
    }
    @stage(1) table reward_pass1 {
        actions = { read_slot_reward; }
        size = 1;
        default_action = read_slot_reward();
    }

    action read_read_ptr() {
        md.read_slot = read_ptr_read.execute(0);
    }
    @stage(1) table read_ptr_pass1 {
        actions = { read_read_ptr; }
        size = 1;
        default_action = read_read_ptr();
    }

    action read_write_ptr() {
        md.write_slot = write_ptr_read.execute(0);
    }
    @stage(2) table write_ptr_pass1 {
        actions = { read_write_ptr; }
        size = 1;
        default_action = read_write_ptr();
    }

    action read_slot_key() {
        md.slot_key = slot_key_read.execute(md.read_slot);
    }
    @stage(2) table slot_key_pass1 {
        actions = { read_slot_key; }
        size = 1;
        default_action = read_slot_key();
    }

    /* Only a valid UPDATE or PULL takes the lock. Keyed on what decides it, rather than
     * behind `if`s, so that it can sit in the stage right after `validate`. */
    action acquire_lock() {
        md.was_locked = lock_acquire.execute(0);
    }
    @stage(2) table lock_pass1 {
        key = {
            md.verdict: exact;
            hdr.olaf.msg_type: exact;
        }
        actions = { acquire_lock; NoAction; }
        const entries = {
            (VERDICT_OK, MSG_UPDATE): acquire_lock();
            (VERDICT_OK, MSG_PULL): acquire_lock();
        }
        size = 2;
        default_action = NoAction();
    }

    action read_active() {
        hdr.olaf.active_clusters = active_read.execute(0);
    }
