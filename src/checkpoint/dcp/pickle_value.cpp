// What a pickle's value tree offers its readers: a dataclass's field by name and the text messages
// quote of a value, cut short so a hostile file's huge list or string never fills a message.
#include "checkpoint/dcp/pickle_value.h"

#include "core/text.h"

namespace cohort::detail::dcp {

namespace {

// Appends `value` to `out` until `out` holds `limit` characters; recursion is bounded by the tree's
// height, which the reader bounds.
void describe_into(const PickleValue& value, std::string& out, size_t limit);

void describe_items(const std::vector<PickleRef>& items, std::string& out, size_t limit) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (out.size() >= limit) {
      out += "...";
      return;
    }
    if (i > 0) out += ", ";
    describe_into(*items[i], out, limit);
  }
}

void describe_quoted(const std::string& text, std::string& out, size_t limit) {
  const size_t room = limit > out.size() ? limit - out.size() : 0;
  out += "'" + excerpt(text, room) + "'";
}

void describe_into(const PickleValue& value, std::string& out, size_t limit) {
  switch (value.kind) {
    case PickleKind::kNone: out += "None"; return;
    case PickleKind::kBool: out += value.integer ? "True" : "False"; return;
    case PickleKind::kInt: out += std::to_string(value.integer); return;
    case PickleKind::kFloat: out += number_text(value.real); return;
    case PickleKind::kString: describe_quoted(value.text, out, limit); return;
    case PickleKind::kBytes:
      out += "b";
      describe_quoted(value.text, out, limit);
      return;
    case PickleKind::kGlobal: out += excerpt(value.text, 80) + "." + excerpt(value.name, 80); return;
    case PickleKind::kPersistentId:
      out += "persistent_id(";
      describe_into(*value.items[0], out, limit);
      out += ")";
      return;
    case PickleKind::kTuple:
      out += "(";
      describe_items(value.items, out, limit);
      out += value.items.size() == 1 ? ",)" : ")";
      return;
    case PickleKind::kList:
      out += "[";
      describe_items(value.items, out, limit);
      out += "]";
      return;
    case PickleKind::kDict:
      out += "{";
      for (size_t i = 0; i < value.entries.size(); ++i) {
        if (out.size() >= limit) {
          out += "...";
          break;
        }
        if (i > 0) out += ", ";
        describe_into(*value.entries[i].first, out, limit);
        out += ": ";
        describe_into(*value.entries[i].second, out, limit);
      }
      out += "}";
      return;
    case PickleKind::kObject:
      describe_into(value.callable(), out, limit);
      out += "(";
      describe_items(value.args().items, out, limit);
      out += ")";
      if (value.state() != nullptr) {
        out += ".__setstate__(";
        describe_into(*value.state(), out, limit);
        out += ")";
      }
      return;
  }
}

}  // namespace

const PickleValue* PickleValue::field(const std::string& key) const {
  if (kind != PickleKind::kDict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {  // the last wins, as in Python
    if (it->first->kind == PickleKind::kString && it->first->text == key) return it->second.get();
  }
  return nullptr;
}

const char* kind_name(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone: return "None";
    case PickleKind::kBool: return "a bool";
    case PickleKind::kInt: return "an int";
    case PickleKind::kFloat: return "a float";
    case PickleKind::kString: return "a str";
    case PickleKind::kBytes: return "bytes";
    case PickleKind::kTuple: return "a tuple";
    case PickleKind::kList: return "a list";
    case PickleKind::kDict: return "a dict";
    case PickleKind::kGlobal: return "a global";
    case PickleKind::kObject: return "an object";
    case PickleKind::kPersistentId: return "a persistent id";
  }
  return "a value";
}

std::string describe(const PickleValue& value, size_t max_chars) {
  std::string out;
  describe_into(value, out, max_chars);
  return out;
}

}  // namespace cohort::detail::dcp
