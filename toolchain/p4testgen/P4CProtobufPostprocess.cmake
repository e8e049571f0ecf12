# Post-processing of a protoc 3.21 generated .pb.h so that p4c's P4::cstring can be passed to the
# generated string setters (BUILD.md section 4, fix 5). Run as
#   cmake -DPB_HEADER=path/to/x.pb.h -P P4CProtobufPostprocess.cmake
#
# Why: protobuf 3.21's setters take std::string or const char*, while P4::cstring converts
# implicitly only to std::string_view (protobuf >= 22 accepts string_view), which gives
# "no matching function for call to ArenaStringPtr::Set(const P4::cstring&, Arena*)" and
# "no matching function for call to ...::add_members(P4::cstring)". The header gets a helper that
# turns such string_view-only types into std::string and leaves every other argument as it was.
# Idempotent: a marker comment says the header has been processed.

if(NOT DEFINED PB_HEADER)
  message(FATAL_ERROR "P4CProtobufPostprocess: PB_HEADER is not set")
endif()
if(NOT EXISTS "${PB_HEADER}")
  message(FATAL_ERROR "P4CProtobufPostprocess: ${PB_HEADER} does not exist")
endif()

set(_marker "// p4c-pb-compat: post-processed for P4::cstring")
file(READ "${PB_HEADER}" _text)
string(FIND "${_text}" "${_marker}" _seen)
if(NOT _seen EQUAL -1)
  return()
endif()

set(_anchor "// @@protoc_insertion_point(includes)")
string(FIND "${_text}" "${_anchor}" _at)
if(_at EQUAL -1)
  message(FATAL_ERROR "P4CProtobufPostprocess: no '${_anchor}' in ${PB_HEADER}")
endif()

set(_helper "${_anchor}
${_marker}
#ifndef P4C_PB_COMPAT_HELPER
#define P4C_PB_COMPAT_HELPER
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
namespace p4c_pb_compat {
// True for types that convert to std::string_view but neither are std::string nor convert to
// const char* (P4::cstring): protobuf 3.21 has no setter that accepts them.
template <typename T>
struct is_sv_like
    : std::integral_constant<bool, std::is_convertible<const T &, std::string_view>::value &&
                                       !std::is_same<std::decay_t<T>, std::string>::value &&
                                       !std::is_convertible<const T &, const char *>::value> {};
template <typename T>
inline std::enable_if_t<is_sv_like<std::decay_t<T>>::value, std::string> fwd(T &&x) {
  return std::string(std::string_view(x));
}
template <typename T>
inline std::enable_if_t<!is_sv_like<std::decay_t<T>>::value, T &&> fwd(T &&x) {
  return static_cast<T &&>(x);
}
}  // namespace p4c_pb_compat
#endif  // P4C_PB_COMPAT_HELPER")
string(REPLACE "${_anchor}" "${_helper}" _text "${_text}")

# Singular string/bytes setters: template <typename ArgT0, ...> set_x(ArgT0&& arg0, ...) forwards
# arg0 to ArenaStringPtr::Set.
string(REPLACE "static_cast<ArgT0 &&>(arg0)" "::p4c_pb_compat::fwd(static_cast<ArgT0 &&>(arg0))"
       _text "${_text}")

# Repeated string fields: an overload for string_view-only types beside the const char* ones.
string(REGEX REPLACE
  "\n  void add_([A-Za-z0-9_]+)\\(const char\\* value\\);"
  "\n  void add_\\1(const char* value);\n  template <typename P4cT, typename = ::std::enable_if_t<::p4c_pb_compat::is_sv_like<P4cT>::value>>\n  void add_\\1(const P4cT& value) { add_\\1(::std::string(::std::string_view(value))); }"
  _text "${_text}")
string(REGEX REPLACE
  "\n  void set_([A-Za-z0-9_]+)\\(int index, const char\\* value\\);"
  "\n  void set_\\1(int index, const char* value);\n  template <typename P4cT, typename = ::std::enable_if_t<::p4c_pb_compat::is_sv_like<P4cT>::value>>\n  void set_\\1(int index, const P4cT& value) { set_\\1(index, ::std::string(::std::string_view(value))); }"
  _text "${_text}")

file(WRITE "${PB_HEADER}" "${_text}")
