// Slurm-style host lists: "node[01-04,07],gpu3" -> node01 node02 node03 node04 node07 gpu3 (see
// hostlist.h). Every malformed list is refused naming the list, never half-expanded.
#include "world/hostlist.h"

#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail {
namespace {

// One bracket group's body, "01-03,07" -> 01 02 03 07; the width of a range's first number is kept.
std::vector<std::string> expand_group(const std::string& group, const std::string& what) {
  COHORT_CHECK_KIND(kInvalidArgument, !group.empty(), what, ": empty brackets []");
  std::vector<std::string> values;
  std::size_t start = 0;
  while (start <= group.size()) {
    std::size_t end = group.find(',', start);
    if (end == std::string::npos) end = group.size();
    const std::string range = group.substr(start, end - start);
    const std::size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    COHORT_CHECK_KIND(kInvalidArgument, all_digits(lo) && all_digits(hi) && lo.size() <= 18 && hi.size() <= 18, what,
                      ": \"", range, "\" in [", group, "] is not a number or a range N-M");
    const unsigned long long a = std::stoull(lo);
    const unsigned long long b = std::stoull(hi);
    COHORT_CHECK_KIND(kInvalidArgument, a <= b, what, ": reversed range ", range, " in [", group, "]");
    COHORT_CHECK_KIND(kInvalidArgument, b - a < kMaxHostListEntries - values.size(), what, ": expands to more than ",
                      kMaxHostListEntries, " hosts");
    for (unsigned long long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      values.push_back(std::move(digits));
    }
    start = end + 1;
  }
  return values;
}

// One comma-free item, "rack[1-2]-n[01-02]": every bracket group multiplies, the first outermost.
void expand_item(const std::string& item, const std::string& what, std::vector<std::string>& hosts) {
  std::vector<std::string> partial{""};
  std::size_t i = 0;
  while (i < item.size()) {
    if (item[i] != '[') {
      std::size_t next = item.find('[', i);
      if (next == std::string::npos) next = item.size();
      for (std::string& p : partial) p += item.substr(i, next - i);
      i = next;
      continue;
    }
    const std::size_t close = item.find(']', i);  // brackets were checked balanced by the caller
    const std::vector<std::string> values = expand_group(item.substr(i + 1, close - i - 1), what);
    COHORT_CHECK_KIND(kInvalidArgument, partial.size() * values.size() + hosts.size() <= kMaxHostListEntries, what,
                      ": expands to more than ", kMaxHostListEntries, " hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const std::string& p : partial) {
      for (const std::string& v : values) next.push_back(p + v);
    }
    partial.swap(next);
    i = close + 1;
  }
  hosts.insert(hosts.end(), partial.begin(), partial.end());
}

}  // namespace

// A host list, expanded under a name for its messages (a variable, or the list itself).
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& what) {
  std::vector<std::string> hosts;
  if (list.empty()) return hosts;
  std::string item;
  bool in_brackets = false;
  for (char c : list) {
    if (c == '[') {
      COHORT_CHECK_KIND(kInvalidArgument, !in_brackets, what, ": '[' inside brackets");
      in_brackets = true;
    } else if (c == ']') {
      COHORT_CHECK_KIND(kInvalidArgument, in_brackets, what, ": ']' without a matching '['");
      in_brackets = false;
    } else if (c == ',' && !in_brackets) {
      COHORT_CHECK_KIND(kInvalidArgument, !item.empty(), what, ": empty host name");
      expand_item(item, what, hosts);
      item.clear();
      continue;
    }
    item += c;
  }
  COHORT_CHECK_KIND(kInvalidArgument, !in_brackets, what, ": unclosed '['");
  COHORT_CHECK_KIND(kInvalidArgument, !item.empty(), what, ": empty host name");
  expand_item(item, what, hosts);
  return hosts;
}

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  return expand_hostlist(nodelist, "nodelist \"" + printable(nodelist) + "\"");
}

}  // namespace cohort::detail
