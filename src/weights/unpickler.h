// A restricted pickle reader: it builds plain data (numbers, strings, tuples, lists, dicts) and
// never runs code. Globals, calls and persistent ids go through hooks, so the caller decides
// which few names a file may mention and what they mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lingbot::pickle {

enum class Kind : uint8_t { None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Global, Object };

// Values live in an Arena and refer to each other by pointer: a pickle can make a list contain
// itself, and plain pointers keep such cycles from leaking.
struct Value {
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  bool big = false;  // Int wider than 64 bits; `s` then holds its little-endian bytes
  double f = 0;
  std::string s;              // Str, Bytes; Global: "module.name"
  std::vector<Value*> items;  // Tuple, List; Dict: key, value, key, value, ...
  int tag = 0;                // Object: what kind of thing a hook made
  std::shared_ptr<void> object;

  bool is_str(const char* text) const { return kind == Kind::Str && s == text; }
};

class Arena {
 public:
  Value* make(Kind kind) {
    values_.emplace_back();
    values_.back().kind = kind;
    return &values_.back();
  }
  size_t size() const { return values_.size(); }

 private:
  std::deque<Value> values_;
};

struct Hooks {
  // Throws unless `module.name` may appear in the file.
  std::function<void(const std::string& module, const std::string& name)> check_global;
  // REDUCE / NEWOBJ: `callable` is whatever GLOBAL produced, `args` a Tuple.
  std::function<Value*(Arena&, Value* callable, Value* args)> call;
  // BINPERSID; null means the file may not use persistent ids.
  std::function<Value*(Arena&, Value* pid)> persistent_load;
};

struct Result {
  std::shared_ptr<Arena> arena;
  Value* root = nullptr;
  size_t consumed = 0;  // bytes up to and including STOP
};

// Reads one pickle from the start of `data`. Anything malformed, truncated or unsupported throws
// Error prefixed with `what`.
Result unpickle(const uint8_t* data, size_t size, const Hooks& hooks, const std::string& what);

// Last value stored under the string key `key` in a Dict (later SETITEMs win, as in Python).
const Value* dict_get(const Value& dict, const char* key);

}  // namespace lingbot::pickle
