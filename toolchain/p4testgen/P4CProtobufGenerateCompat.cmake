# Replacement protobuf_generate() for building p4c against Debian 12's protobuf 3.21 with CMake's
# FindProtobuf module (BUILD.md section 4, fix 4). Included by cmake/Protobuf.cmake after
# find_package(Protobuf MODULE), so it overrides the module's own protobuf_generate().
#
# Why: CMake 3.25's protobuf_generate() places outputs relative to CMAKE_CURRENT_SOURCE_DIR, which
# is wrong for protos that live in the p4runtime tree (the build then waits for files protoc never
# writes), and it does not know DEPENDENCIES. This one places each output under PROTOC_OUT_DIR at
# the proto's path relative to the first import dir that holds it, as protoc itself does, and runs
# the .pb.h post-processing of P4CProtobufPostprocess.cmake (fix 5) after every C++ generation.

set(P4C_PB_COMPAT_POSTPROCESS "${CMAKE_CURRENT_LIST_DIR}/P4CProtobufPostprocess.cmake")

function(protobuf_generate)
  set(_options APPEND_PATH)
  set(_single LANGUAGE OUT_VAR EXPORT_MACRO PROTOC_OUT_DIR PLUGIN PLUGIN_OPTIONS TARGET)
  set(_multi PROTOS IMPORT_DIRS GENERATE_EXTENSIONS PROTOC_OPTIONS DEPENDENCIES)
  cmake_parse_arguments(pg "${_options}" "${_single}" "${_multi}" ${ARGN})

  if(NOT pg_LANGUAGE)
    set(pg_LANGUAGE cpp)
  endif()
  string(TOLOWER "${pg_LANGUAGE}" pg_LANGUAGE)
  if(NOT pg_PROTOC_OUT_DIR)
    set(pg_PROTOC_OUT_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  if(NOT pg_GENERATE_EXTENSIONS)
    if(pg_LANGUAGE STREQUAL "cpp")
      set(pg_GENERATE_EXTENSIONS .pb.h .pb.cc)
    elseif(pg_LANGUAGE STREQUAL "python")
      set(pg_GENERATE_EXTENSIONS _pb2.py)
    else()
      message(FATAL_ERROR "protobuf_generate (p4c compat): no GENERATE_EXTENSIONS for ${pg_LANGUAGE}")
    endif()
  endif()

  # Sources: PROTOS plus every *.proto source of TARGET.
  set(_protos ${pg_PROTOS})
  if(pg_TARGET)
    get_target_property(_target_srcs ${pg_TARGET} SOURCES)
    foreach(_src IN LISTS _target_srcs)
      if(_src MATCHES "\\.proto$")
        list(APPEND _protos "${_src}")
      endif()
    endforeach()
  endif()
  if(NOT _protos)
    message(FATAL_ERROR "protobuf_generate (p4c compat): no .proto files given")
  endif()
  list(REMOVE_DUPLICATES _protos)

  set(_import_dirs)
  set(_import_args)
  foreach(_dir IN LISTS pg_IMPORT_DIRS ITEMS "${CMAKE_CURRENT_SOURCE_DIR}")
    get_filename_component(_abs "${_dir}" ABSOLUTE)
    if(NOT _abs IN_LIST _import_dirs)
      list(APPEND _import_dirs "${_abs}")
      list(APPEND _import_args "-I${_abs}")
    endif()
  endforeach()

  # Targets in DEPENDENCIES cannot be file dependencies of a custom command.
  set(_file_deps)
  foreach(_dep IN LISTS pg_DEPENDENCIES)
    if(NOT TARGET "${_dep}")
      list(APPEND _file_deps "${_dep}")
    endif()
  endforeach()

  set(_all_outputs)
  foreach(_proto IN LISTS _protos)
    get_filename_component(_abs_proto "${_proto}" ABSOLUTE)
    set(_rel "")
    foreach(_dir IN LISTS _import_dirs)
      file(RELATIVE_PATH _candidate "${_dir}" "${_abs_proto}")
      if(NOT _candidate MATCHES "^\\.\\./" AND NOT IS_ABSOLUTE "${_candidate}")
        set(_rel "${_candidate}")
        break()
      endif()
    endforeach()
    if(_rel STREQUAL "")
      message(FATAL_ERROR "protobuf_generate (p4c compat): ${_abs_proto} is under no import dir")
    endif()
    get_filename_component(_rel_dir "${_rel}" DIRECTORY)
    get_filename_component(_name "${_rel}" NAME_WE)
    if(_rel_dir STREQUAL "")
      set(_out_base "${pg_PROTOC_OUT_DIR}/${_name}")
    else()
      set(_out_base "${pg_PROTOC_OUT_DIR}/${_rel_dir}/${_name}")
    endif()

    set(_outputs)
    set(_header "")
    foreach(_ext IN LISTS pg_GENERATE_EXTENSIONS)
      list(APPEND _outputs "${_out_base}${_ext}")
      if(_ext STREQUAL ".pb.h")
        set(_header "${_out_base}${_ext}")
      endif()
    endforeach()

    set(_post_cmd)
    set(_post_dep)
    if(pg_LANGUAGE STREQUAL "cpp" AND NOT _header STREQUAL "")
      set(_post_cmd COMMAND "${CMAKE_COMMAND}" "-DPB_HEADER=${_header}" -P "${P4C_PB_COMPAT_POSTPROCESS}")
      set(_post_dep "${P4C_PB_COMPAT_POSTPROCESS}")
    endif()

    add_custom_command(
      OUTPUT ${_outputs}
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${pg_PROTOC_OUT_DIR}"
      COMMAND "${Protobuf_PROTOC_EXECUTABLE}" ${pg_PROTOC_OPTIONS} "--${pg_LANGUAGE}_out" "${pg_PROTOC_OUT_DIR}" ${_import_args} "${_abs_proto}"
      ${_post_cmd}
      DEPENDS "${_abs_proto}" ${_file_deps} ${_post_dep}
      COMMENT "Running ${pg_LANGUAGE} protocol buffer compiler on ${_rel} (p4c compat)"
      VERBATIM
    )
    list(APPEND _all_outputs ${_outputs})
  endforeach()

  set_source_files_properties(${_all_outputs} PROPERTIES GENERATED TRUE)
  # Generated .pb.cc files are kept out of unity chunks: several of them in one translation unit
  # would be one more thing that could break, for no gain in a handful of files.
  foreach(_out IN LISTS _all_outputs)
    if(_out MATCHES "\\.pb\\.cc$")
      set_source_files_properties("${_out}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
  if(pg_OUT_VAR)
    set(${pg_OUT_VAR} ${_all_outputs} PARENT_SCOPE)
  endif()
  if(pg_TARGET)
    target_sources(${pg_TARGET} PRIVATE ${_all_outputs})
  endif()
endfunction()
