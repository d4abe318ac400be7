// The pickle opcodes cohort's unpickler reads (pickle_reader.cpp): what Python's pickler emits at
// protocols 2 to 5 for the values in PyTorch's files, named as Python's pickletools names them (for
// messages that say which opcode went wrong).
#pragma once

#include <cstdint>
#include <utility>

namespace cohort::detail::dcp::pickle_op {

// The opcodes read, by the names Python's pickletools gives them.
// clang-format off
enum Op : uint8_t {
  kMark = '(', kStop = '.', kBinInt = 'J', kBinInt1 = 'K', kBinInt2 = 'M', kNone = 'N', kBinPersId = 'Q',
  kReduce = 'R', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kEmptyDict = '}', kAppends = 'e',
  kGet = 'g', kBinGet = 'h', kLongBinGet = 'j', kEmptyList = ']', kPut = 'p', kBinPut = 'q', kLongBinPut = 'r',
  kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G', kBinBytes = 'B',
  kShortBinBytes = 'C', kProto = 0x80, kNewObj = 0x81, kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87,
  kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e, kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95,
};

inline constexpr std::pair<Op, const char*> kOpNames[] = {
  {kMark, "MARK"}, {kStop, "STOP"}, {kBinInt, "BININT"}, {kBinInt1, "BININT1"}, {kBinInt2, "BININT2"},
  {kNone, "NONE"}, {kBinPersId, "BINPERSID"}, {kReduce, "REDUCE"}, {kBinUnicode, "BINUNICODE"},
  {kAppend, "APPEND"}, {kBuild, "BUILD"}, {kGlobal, "GLOBAL"}, {kEmptyDict, "EMPTY_DICT"}, {kAppends, "APPENDS"},
  {kGet, "GET"}, {kBinGet, "BINGET"}, {kLongBinGet, "LONG_BINGET"}, {kEmptyList, "EMPTY_LIST"}, {kPut, "PUT"},
  {kBinPut, "BINPUT"}, {kLongBinPut, "LONG_BINPUT"}, {kSetItem, "SETITEM"}, {kTuple, "TUPLE"},
  {kEmptyTuple, "EMPTY_TUPLE"}, {kSetItems, "SETITEMS"}, {kBinFloat, "BINFLOAT"}, {kBinBytes, "BINBYTES"},
  {kShortBinBytes, "SHORT_BINBYTES"}, {kProto, "PROTO"}, {kNewObj, "NEWOBJ"}, {kTuple1, "TUPLE1"},
  {kTuple2, "TUPLE2"}, {kTuple3, "TUPLE3"}, {kNewTrue, "NEWTRUE"}, {kNewFalse, "NEWFALSE"}, {kLong1, "LONG1"},
  {kShortBinUnicode, "SHORT_BINUNICODE"}, {kBinUnicode8, "BINUNICODE8"}, {kBinBytes8, "BINBYTES8"},
  {kStackGlobal, "STACK_GLOBAL"}, {kMemoize, "MEMOIZE"}, {kFrame, "FRAME"},
};
// clang-format on

// The opcode's name; nullptr for one cohort does not read.
inline const char* op_name(uint8_t op) {
  for (const auto& [code, name] : kOpNames) {
    if (code == op) return name;
  }
  return nullptr;
}

}  // namespace cohort::detail::dcp::pickle_op
