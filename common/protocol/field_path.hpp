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

  std::string ToString() const {
    std::string s = parent != nullptr ? parent->ToString() + "." : std::string();
    s += name;
    if (index != kNoIndex) s += "[" + std::to_string(index) + "]";
    return s;
  }
};

}  // namespace kiln::common::protocol
