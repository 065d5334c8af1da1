#include "weights/unpickler.h"

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "lingbot/error.h"

namespace lingbot::pickle {
namespace {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const Hooks& hooks, const std::string& what)
      : data_(data), size_(size), hooks_(hooks), what_(what), arena_(std::make_shared<Arena>()) {}

  Result run() {
    while (true) {
      op_at_ = pos_;
      const uint8_t op = read_u8();
      switch (op) {
        case 0x80: {  // PROTO
          const uint8_t v = read_u8();
          if (v > 5) fail("pickle protocol " + std::to_string(v) + " is newer than 5");
          break;
        }
        case 0x95:  // FRAME: only a read-ahead hint, the whole pickle is in memory
          read_u64();
          break;
        case '.': {  // STOP
          Result r;
          r.root = pop();
          r.arena = arena_;
          r.consumed = pos_;
          return r;
        }
        case '(':
          marks_.push_back(stack_.size());
          break;
        case '0':  // POP; with nothing above the mark, Python discards the mark instead
          if (stack_.size() > floor()) {
            stack_.pop_back();
          } else {
            pop_mark();
          }
          break;
        case '1':
          pop_mark();
          break;
        case '2':
          push(top());
          break;
        case 'N':
          push(make(Kind::None));
          break;
        case 0x88:
        case 0x89: {
          Value* v = make(Kind::Bool);
          v->b = op == 0x88;
          push(v);
          break;
        }
        case 'J':
          push_int(static_cast<int32_t>(read_u32()));
          break;
        case 'K':
          push_int(read_u8());
          break;
        case 'M':
          push_int(read_u16());
          break;
        case 0x8a:
          push_long(read_u8());
          break;
        case 0x8b: {
          const int32_t n = static_cast<int32_t>(read_u32());
          if (n < 0) fail("negative LONG4 length");
          push_long(static_cast<size_t>(n));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian IEEE double
          const uint8_t* p = take(8);
          uint64_t u = 0;
          for (int k = 0; k < 8; ++k) u = u << 8 | p[k];
          Value* v = make(Kind::Float);
          std::memcpy(&v->f, &u, 8);
          push(v);
          break;
        }
        case 'X':
          push_text(Kind::Str, read_u32());
          break;
        case 0x8c:
          push_text(Kind::Str, read_u8());
          break;
        case 0x8d:
          push_text(Kind::Str, read_u64());
          break;
        case 'T': {  // BINSTRING (Python 2 str)
          const int32_t n = static_cast<int32_t>(read_u32());
          if (n < 0) fail("negative BINSTRING length");
          push_text(Kind::Str, static_cast<uint64_t>(n));
          break;
        }
        case 'U':
          push_text(Kind::Str, read_u8());
          break;
        case 'B':
          push_text(Kind::Bytes, read_u32());
          break;
        case 'C':
          push_text(Kind::Bytes, read_u8());
          break;
        case 0x8e:
          push_text(Kind::Bytes, read_u64());
          break;
        case ')':
          push(make(Kind::Tuple));
          break;
        case ']':
          push(make(Kind::List));
          break;
        case '}':
          push(make(Kind::Dict));
          break;
        case 0x8f:
          push(make(Kind::List));
          break;  // EMPTY_SET: a list is all we need
        case 't':
          push(container(Kind::Tuple, pop_mark()));
          break;
        case 'l':
          push(container(Kind::List, pop_mark()));
          break;
        case 0x91:
          push(container(Kind::List, pop_mark()));
          break;  // FROZENSET
        case 'd': {
          std::vector<Value*> items = pop_mark();
          if (items.size() % 2) fail("DICT with an odd number of items");
          push(container(Kind::Dict, std::move(items)));
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          if (stack_.size() - floor() < n) fail("stack underflow");
          std::vector<Value*> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(container(Kind::Tuple, std::move(items)));
          break;
        }
        case 'a': {
          Value* v = pop();
          expect(top(), Kind::List, "APPEND")->items.push_back(v);
          break;
        }
        case 'e':
        case 0x90: {  // APPENDS, ADDITEMS
          std::vector<Value*> items = pop_mark();
          Value* list = expect(top(), Kind::List, "APPENDS");
          list->items.insert(list->items.end(), items.begin(), items.end());
          break;
        }
        case 's': {
          Value* v = pop();
          Value* k = pop();
          Value* dict = expect(top(), Kind::Dict, "SETITEM");
          dict->items.push_back(k);
          dict->items.push_back(v);
          break;
        }
        case 'u': {
          std::vector<Value*> items = pop_mark();
          if (items.size() % 2) fail("SETITEMS with an odd number of items");
          Value* dict = expect(top(), Kind::Dict, "SETITEMS");
          dict->items.insert(dict->items.end(), items.begin(), items.end());
          break;
        }
        case 'q':
          memo_[read_u8()] = top();
          break;
        case 'r':
          memo_[read_u32()] = top();
          break;
        case 0x94:
          memo_[memo_.size()] = top();
          break;  // MEMOIZE
        case 'h':
          push(memo_get(read_u8()));
          break;
        case 'j':
          push(memo_get(read_u32()));
          break;
        case 'c': {
          std::string module = read_line();
          std::string name = read_line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Value* name = pop();
          Value* module = pop();
          if (module->kind != Kind::Str || name->kind != Kind::Str)
            fail("STACK_GLOBAL needs two strings");
          push(global(module->s, name->s));
          break;
        }
        case 'R':
        case 0x81: {  // REDUCE, NEWOBJ
          Value* args = pop();
          Value* callable = pop();
          push(call(callable, args));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          Value* kwargs = pop();
          Value* args = pop();
          Value* callable = pop();
          if (kwargs->kind != Kind::Dict || !kwargs->items.empty())
            fail("NEWOBJ_EX with keyword arguments");
          push(call(callable, args));
          break;
        }
        case 'b': {  // BUILD
          Value* state = pop();
          Value* obj = top();
          if (state->kind == Kind::None) break;
          if (obj->kind == Kind::Dict && state->kind == Kind::Dict) {
            // A dict updated with itself is unchanged. Every other merge copies the state's
            // items, which one memoised state merged over and over would multiply without
            // bytes to describe them; a real checkpoint merges each state once, so its copies
            // never outnumber its bytes.
            if (state == obj) break;
            copied_ += state->items.size();
            if (copied_ > size_) fail("BUILD copies more items than the pickle holds");
            obj->items.insert(obj->items.end(), state->items.begin(), state->items.end());
            break;
          }
          fail("BUILD with state for an object that takes none");
        }
        case 'Q': {  // BINPERSID
          Value* pid = pop();
          if (!hooks_.persistent_load) fail("unexpected persistent id");
          push(hooks_.persistent_load(*arena_, pid));
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("unsupported opcode ") + hex);
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw Error(what_ + ": corrupt or unsupported pickle (" + why + " at byte " +
                std::to_string(op_at_) + ")");
  }

  const uint8_t* take(uint64_t n) {
    if (n > size_ - pos_) fail("data ends early");
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  uint8_t read_u8() { return *take(1); }
  uint16_t read_u16() {
    const uint8_t* p = take(2);
    return static_cast<uint16_t>(p[0] | p[1] << 8);
  }
  uint32_t read_u32() {
    const uint8_t* p = take(4);
    return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
  }
  uint64_t read_u64() {
    const uint64_t lo = read_u32();
    return lo | static_cast<uint64_t>(read_u32()) << 32;
  }
  std::string read_line() {
    const size_t left = size_ - pos_;
    const void* nl = std::memchr(data_ + pos_, '\n', left);
    if (!nl) fail("GLOBAL name without a newline");
    const size_t n = static_cast<const uint8_t*>(nl) - (data_ + pos_);
    std::string s(reinterpret_cast<const char*>(take(n)), n);
    take(1);
    return s;
  }

  Value* make(Kind k) { return arena_->make(k); }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value* v) { stack_.push_back(v); }
  Value* top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  Value* pop() {
    Value* v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Value* container(Kind k, std::vector<Value*> items) {
    Value* v = make(k);
    v->items = std::move(items);
    return v;
  }
  Value* expect(Value* v, Kind k, const char* op) {
    if (v->kind != k) fail(std::string(op) + " on the wrong kind of object");
    return v;
  }
  Value* memo_get(uint64_t i) {
    auto it = memo_.find(i);
    if (it == memo_.end()) fail("memo entry " + std::to_string(i) + " is not set");
    return it->second;
  }

  void push_int(int64_t i) {
    Value* v = make(Kind::Int);
    v->i = i;
    push(v);
  }
  // Little-endian two's complement of n bytes.
  void push_long(uint64_t n) {
    const uint8_t* p = take(n);
    Value* v = make(Kind::Int);
    if (n > 8) {
      v->big = true;
      v->s.assign(reinterpret_cast<const char*>(p), n);
    } else if (n > 0) {
      uint64_t u = 0;
      for (uint64_t k = 0; k < n; ++k) u |= static_cast<uint64_t>(p[k]) << (8 * k);
      if (n < 8 && (p[n - 1] & 0x80)) u |= ~uint64_t{0} << (8 * n);
      v->i = static_cast<int64_t>(u);
    }
    push(v);
  }
  void push_text(Kind k, uint64_t n) {
    const uint8_t* p = take(n);
    Value* v = make(k);
    v->s.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
    push(v);
  }

  Value* global(const std::string& module, const std::string& name) {
    if (!hooks_.check_global)
      throw Error(what_ + ": checkpoint references disallowed global " + module + "." + name);
    hooks_.check_global(module, name);
    Value* v = make(Kind::Global);
    v->s = module + "." + name;
    return v;
  }
  Value* call(Value* callable, Value* args) {
    if (callable->kind != Kind::Global) fail("call of an object that is not a global");
    if (args->kind != Kind::Tuple) fail("call arguments are not a tuple");
    if (!hooks_.call) fail("unexpected call of " + callable->s);
    return hooks_.call(*arena_, callable, args);
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0, op_at_ = 0;
  size_t copied_ = 0;  // items BUILD copied from one dict into another
  const Hooks& hooks_;
  const std::string& what_;
  std::shared_ptr<Arena> arena_;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value*> memo_;
};

}  // namespace

Result unpickle(const uint8_t* data, size_t size, const Hooks& hooks, const std::string& what) {
  return Reader(data, size, hooks, what).run();
}

const Value* dict_get(const Value& dict, const char* key) {
  if (dict.kind != Kind::Dict) return nullptr;
  for (size_t k = dict.items.size(); k >= 2; k -= 2)
    if (dict.items[k - 2]->is_str(key)) return dict.items[k - 1];
  return nullptr;
}

}  // namespace lingbot::pickle
