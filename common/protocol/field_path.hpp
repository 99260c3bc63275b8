// FieldPath: names a value inside a frame for decode errors: "execute",
// "execute.limits", "execute.files[3]". A chain of stack-allocated links,
// built into a string only on error. For map_reader.hpp; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/protocol/field_list.hpp"

namespace kiln::common::protocol {

struct FieldPath {
  const FieldPath* parent = nullptr;
  std::string_view name;
  size_t index = kNoIndex;

  // Appends rather than `"[" + std::to_string(i)`, which trips GCC 12's
  // -Wrestrict false positive at -O3.
  std::string ToString() const {
    std::string s;
    if (parent != nullptr) {
      s = parent->ToString();
      s += '.';
    }
    s += name;
    if (index != kNoIndex) {
      s += '[';
      s += std::to_string(index);
      s += ']';
    }
    return s;
  }
};

}  // namespace kiln::common::protocol
