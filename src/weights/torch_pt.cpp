#include "weights/torch_pt.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lingbot/error.h"
#include "weights/mapped_file.h"
#include "weights/unpickler.h"
#include "weights/zip_reader.h"

namespace lingbot {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::Value;

enum Tag { kStorageTag = 1, kTensorTag = 2 };

struct Storage {
  DType dtype = DType::U8;
  std::string key;
  uint64_t numel = 0;             // as the pickle declares it
  const uint8_t* data = nullptr;  // found once the container is read
  uint64_t nbytes = 0;            // bytes available at `data`
};

struct TensorSpec {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  Shape shape;
  std::vector<int64_t> stride;
};

// Limits that keep hostile files cheap; real checkpoints stay far below them.
constexpr size_t kMaxRank = 64;
constexpr int kMaxDepth = 100;
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxNumel = int64_t{1} << 50;

bool storage_dtype(const std::string& name, DType* out) {
  static const std::unordered_map<std::string, DType> kTypes = {
      {"torch.FloatStorage", DType::F32},     {"torch.HalfStorage", DType::F16},
      {"torch.BFloat16Storage", DType::BF16}, {"torch.DoubleStorage", DType::F64},
      {"torch.LongStorage", DType::I64},      {"torch.IntStorage", DType::I32},
      {"torch.ShortStorage", DType::I16},     {"torch.CharStorage", DType::I8},
      {"torch.ByteStorage", DType::U8},       {"torch.BoolStorage", DType::Bool},
      {"torch.UntypedStorage", DType::U8}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return false;
  *out = it->second;
  return true;
}

const std::set<std::string>& allowed_calls() {
  static const std::set<std::string> kCalls = {
      "collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
      "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
      "torch.Size"};
  return kCalls;
}

// One pass of the restricted unpickler over a torch pickle, then the tensors it names.
class TorchPickle {
 public:
  explicit TorchPickle(std::string what) : what_(std::move(what)) {}

  void load(const uint8_t* data, size_t size) {
    pickle::Hooks hooks;
    hooks.check_global = [this](const std::string& module, const std::string& name) {
      const std::string full = module + "." + name;
      DType unused;
      if (!allowed_calls().count(full) && !storage_dtype(full, &unused))
        throw Error(what_ + ": checkpoint references disallowed global " + full +
                    " (only tensors and plain containers can be loaded)");
    };
    hooks.call = [this](Arena& arena, Value* callable, Value* args) {
      return call(arena, callable->s, args->items);
    };
    hooks.persistent_load = [this](Arena& arena, Value* pid) { return persistent(arena, pid); };
    result_ = pickle::unpickle(data, size, hooks, what_);
  }
  size_t consumed() const { return result_.consumed; }

  std::map<std::string, std::shared_ptr<Storage>>& storages() { return storages_; }

  // The state dict: unwraps {'model': ...} and flattens nested containers to dotted keys.
  TensorMap materialize(const std::shared_ptr<void>& owner, uint64_t copy_budget) {
    const Value* root = result_.root;
    for (const char* wrapper : {"model", "state_dict"}) {
      const Value* inner = pickle::dict_get(*root, wrapper);
      if (inner && inner->kind == Kind::Dict) {
        root = inner;
        break;
      }
    }
    if (root->kind != Kind::Dict)
      throw Error(what_ + ": checkpoint holds no dict of tensors (its top-level object is " +
                  kind_name(*root) + ")");
    std::vector<std::pair<std::string, const Value*>> named;
    size_t visits = 0;
    flatten(*root, "", 0, &visits, &named);

    copy_budget_ = copy_budget;
    TensorMap out;
    std::unordered_map<const void*, Tensor> done;  // a tensor pickled once but listed twice
    for (auto& [name, v] : named) {
      auto it = done.find(v->object.get());
      if (it == done.end())
        it = done.emplace(v->object.get(),
                          make_tensor(name, *static_cast<TensorSpec*>(v->object.get()), owner))
                 .first;
      out[name] = it->second;
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(what_ + ": not a valid torch checkpoint (" + why + ")");
  }

  static std::string kind_name(const Value& v) {
    switch (v.kind) {
      case Kind::None:
        return "None";
      case Kind::Bool:
        return "a bool";
      case Kind::Int:
        return "an int";
      case Kind::Float:
        return "a float";
      case Kind::Str:
        return "a string";
      case Kind::Bytes:
        return "bytes";
      case Kind::Tuple:
        return "a tuple";
      case Kind::List:
        return "a list";
      case Kind::Dict:
        return "a dict";
      case Kind::Global:
        return v.s;
      case Kind::Object:
        return v.tag == kTensorTag ? "a single tensor" : "a storage";
    }
    return "?";
  }

  int64_t as_int(const Value* v, const char* field) const {
    if (v->kind != Kind::Int || v->big) fail(std::string(field) + " is not an integer");
    return v->i;
  }

  Value* call(Arena& arena, const std::string& fn, const std::vector<Value*>& args) {
    if (fn == "collections.OrderedDict") {
      Value* dict = arena.make(Kind::Dict);
      if (args.empty()) return dict;
      // OrderedDict(iterable of pairs)
      if (args.size() != 1 || (args[0]->kind != Kind::List && args[0]->kind != Kind::Tuple))
        fail("unexpected OrderedDict arguments");
      for (Value* pair : args[0]->items) {
        if (pair->kind != Kind::Tuple || pair->items.size() != 2) fail("bad OrderedDict item");
        dict->items.push_back(pair->items[0]);
        dict->items.push_back(pair->items[1]);
      }
      return dict;
    }
    if (fn == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(arena, args);
    if (fn == "torch._utils._rebuild_parameter" ||
        fn == "torch._utils._rebuild_parameter_with_state") {
      // A Parameter is its tensor plus Python-side attributes that mean nothing here.
      if (args.empty() || args[0]->kind != Kind::Object || args[0]->tag != kTensorTag)
        fail(fn + " without a tensor");
      return args[0];
    }
    if (fn == "torch.Size") {
      if (args.size() != 1 || args[0]->kind != Kind::Tuple) fail("bad torch.Size arguments");
      return args[0];
    }
    fail("call of " + fn);
  }

  Value* rebuild_tensor(Arena& arena, const std::vector<Value*>& args) {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (args.size() < 4) fail("_rebuild_tensor_v2 with too few arguments");
    if (args[0]->kind != Kind::Object || args[0]->tag != kStorageTag)
      fail("_rebuild_tensor_v2 without a storage");
    const Value* size = args[2];
    const Value* stride = args[3];
    if (size->kind != Kind::Tuple || stride->kind != Kind::Tuple ||
        size->items.size() != stride->items.size() || size->items.size() > kMaxRank)
      fail("tensor size and stride do not match");
    auto spec = std::make_shared<TensorSpec>();
    spec->storage = std::static_pointer_cast<Storage>(args[0]->object);
    spec->offset = as_int(args[1], "storage offset");
    if (spec->offset < 0 || spec->offset > kMaxNumel) fail("storage offset out of range");
    int64_t numel = 1;
    for (size_t d = 0; d < size->items.size(); ++d) {
      const int64_t n = as_int(size->items[d], "tensor size");
      const int64_t s = as_int(stride->items[d], "tensor stride");
      if (n < 0 || n > kMaxDim || s < 0 || s > kMaxNumel)
        fail("tensor size or stride out of range");
      if (n > 0 && numel > kMaxNumel / n) fail("tensor is too large");
      if (n > 0) numel *= n;
      spec->shape.push_back(n);
      spec->stride.push_back(s);
    }
    Value* v = arena.make(Kind::Object);
    v->tag = kTensorTag;
    v->object = spec;
    return v;
  }

  Value* persistent(Arena& arena, Value* pid) {
    // zip: ('storage', type, key, location, numel); legacy adds view metadata.
    if (pid->kind != Kind::Tuple || pid->items.size() < 5 || !pid->items[0]->is_str("storage"))
      fail("unknown persistent id");
    const auto& f = pid->items;
    DType dtype;
    if (f[1]->kind != Kind::Global || !storage_dtype(f[1]->s, &dtype)) fail("unknown storage type");
    if (f[2]->kind != Kind::Str) fail("storage key is not a string");
    const int64_t numel = as_int(f[4], "storage size");
    if (numel < 0 || numel > kMaxNumel) fail("storage size out of range");
    if (f.size() > 5 && f[5]->kind != Kind::None)
      throw Error(what_ +
                  ": legacy storage views are not supported; re-save the checkpoint with "
                  "a current torch.save");
    auto& s = storages_[f[2]->s];
    if (!s) {
      s = std::make_shared<Storage>();
      s->dtype = dtype;
      s->key = f[2]->s;
      s->numel = static_cast<uint64_t>(numel);
    } else if (s->dtype != dtype || s->numel != static_cast<uint64_t>(numel)) {
      fail("storage " + s->key + " is declared twice with different types or sizes");
    }
    Value* v = arena.make(Kind::Object);
    v->tag = kStorageTag;
    v->object = s;
    return v;
  }

  void flatten(const Value& v, const std::string& prefix, int depth, size_t* visits,
               std::vector<std::pair<std::string, const Value*>>* out) const {
    // Depth catches cycles; the visit budget catches a DAG of shared containers that would
    // take exponential time to walk.
    if (depth > kMaxDepth) fail("containers nest more than " + std::to_string(kMaxDepth) + " deep");
    auto visit = [&](const std::string& key, const Value* child) {
      if (++*visits > 8 * result_.arena->size() + 4096) fail("too many shared containers");
      const std::string name = prefix.empty() ? key : prefix + "." + key;
      if (child->kind == Kind::Object && child->tag == kTensorTag) {
        out->emplace_back(name, child);
      } else if (child->kind == Kind::Dict || child->kind == Kind::List ||
                 child->kind == Kind::Tuple) {
        flatten(*child, name, depth + 1, visits, out);
      }
    };
    if (v.kind == Kind::Dict) {
      for (size_t k = 0; k + 1 < v.items.size(); k += 2) {
        const Value* key = v.items[k];
        if (key->kind == Kind::Str) {
          visit(key->s, v.items[k + 1]);
        } else if (key->kind == Kind::Int && !key->big) {
          visit(std::to_string(key->i), v.items[k + 1]);
        } else {
          fail("dict key that is neither a string nor an integer");
        }
      }
    } else {
      for (size_t k = 0; k < v.items.size(); ++k) visit(std::to_string(k), v.items[k]);
    }
  }

  Tensor make_tensor(const std::string& name, const TensorSpec& spec,
                     const std::shared_ptr<void>& owner) {
    const Storage& s = *spec.storage;
    const size_t esize = dtype_size(s.dtype);
    const int64_t numel = shape_numel(spec.shape);
    if (numel == 0) return Tensor::zeros(spec.shape, s.dtype);
    const uint64_t avail = s.data ? std::min<uint64_t>(s.numel, s.nbytes / esize) : 0;
    // The last element the view touches; sizes and strides are below 2^50, so this fits.
    unsigned __int128 last = static_cast<uint64_t>(spec.offset);
    for (size_t d = 0; d < spec.shape.size(); ++d)
      last +=
          static_cast<unsigned __int128>(spec.shape[d] - 1) * static_cast<uint64_t>(spec.stride[d]);
    if (last >= avail)
      fail("tensor " + name + " reaches past the end of its storage " + s.key + " (" +
           std::to_string(avail) + " elements)");

    bool contiguous = true;
    int64_t expect = 1;
    for (size_t d = spec.shape.size(); d-- > 0;) {
      if (spec.shape[d] != 1 && spec.stride[d] != expect) contiguous = false;
      expect *= spec.shape[d];
    }
    const uint8_t* base = s.data + static_cast<size_t>(spec.offset) * esize;
    if (contiguous && reinterpret_cast<uintptr_t>(base) % esize == 0)
      return Tensor::wrap(const_cast<uint8_t*>(base), spec.shape, s.dtype, owner);

    const uint64_t bytes = static_cast<uint64_t>(numel) * esize;
    if (bytes > copy_budget_)
      fail("strided views expand to more memory than the file could justify");
    copy_budget_ -= bytes;
    Tensor t = Tensor::zeros(spec.shape, s.dtype);
    uint8_t* dst = static_cast<uint8_t*>(t.raw());
    if (contiguous) {
      std::memcpy(dst, base, bytes);
      return t;
    }
    // Walk the view in row-major order, an odometer over all but the last dimension.
    const size_t rank = spec.shape.size();
    const int64_t inner = spec.shape[rank - 1], inner_stride = spec.stride[rank - 1];
    std::vector<int64_t> idx(rank, 0);
    for (int64_t done = 0; done < numel; done += inner) {
      int64_t src = 0;
      for (size_t d = 0; d + 1 < rank; ++d) src += idx[d] * spec.stride[d];
      for (int64_t k = 0; k < inner; ++k, dst += esize)
        std::memcpy(dst, base + static_cast<size_t>(src + k * inner_stride) * esize, esize);
      for (size_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < spec.shape[d]) break;
        idx[d] = 0;
      }
    }
    return t;
  }

  std::string what_;
  pickle::Result result_;
  std::map<std::string, std::shared_ptr<Storage>> storages_;
  uint64_t copy_budget_ = 0;
};

constexpr uint64_t kExtraCopyBytes = 64u << 20;

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = v << 8 | p[k];
  return v;
}

// Bytes a storage's declared elements occupy; the numel limit keeps this from overflowing.
uint64_t storage_bytes(const Storage& s) {
  return s.numel * dtype_size(s.dtype);
}

TensorMap parse_zip(const uint8_t* data, size_t size, const std::shared_ptr<void>& owner,
                    const std::string& what) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  constexpr bool kVerifyCrc = false;  // let the fuzzer reach the unpickler
#else
  constexpr bool kVerifyCrc = true;
#endif
  // torch can be told not to compute CRCs, and then records 0: nothing to check against.
  auto checked = [&](const ZipEntry& e) {
    return zip_entry_bytes(e, what, kVerifyCrc && e.crc32 != 0);
  };
  const std::vector<ZipEntry> entries = read_zip_directory(data, size, what);
  std::unordered_map<std::string, const ZipEntry*> by_name;
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : entries) {
    if (!by_name.emplace(e.name, &e).second)
      throw Error(what + ": zip archive lists " + e.name + " twice");
    // The records sit in one top-level folder whose name varies with the file saved.
    const size_t slash = e.name.find('/');
    const bool top =
        e.name == "data.pkl" || (slash != std::string::npos && slash + 9 == e.name.size() &&
                                 e.name.compare(slash, 9, "/data.pkl") == 0);
    if (top) {
      if (pkl) throw Error(what + ": zip archive holds more than one data.pkl");
      pkl = &e;
    }
  }
  if (!pkl)
    throw Error(what + ": zip archive has no data.pkl record, so it is not a torch.save file");
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - 8);

  auto order = by_name.find(prefix + "byteorder");
  if (order != by_name.end()) {
    const ZipEntry& e = *order->second;
    const uint8_t* p = checked(e);
    const std::string text(reinterpret_cast<const char*>(p), e.size);
    if (text != "little")
      throw Error(what + ": checkpoint was saved with byte order '" + text.substr(0, 16) +
                  "'; only little-endian checkpoints are supported");
  }

  TorchPickle tp(what);
  // CRC-checking the pickle catches most corruption cheaply; tensor records are not checked,
  // since that would read the whole file up front.
  tp.load(checked(*pkl), pkl->size);
  for (auto& [key, s] : tp.storages()) {
    auto it = by_name.find(prefix + "data/" + key);
    if (it == by_name.end())
      throw Error(what + ": checkpoint is missing the record data/" + key + " of a tensor");
    const ZipEntry& e = *it->second;
    s->data = zip_entry_bytes(e, what, false);
    s->nbytes = e.size;
    if (e.size < storage_bytes(*s))
      throw Error(what + ": record data/" + key + " holds " + std::to_string(e.size) +
                  " bytes but its storage needs " + std::to_string(storage_bytes(*s)));
  }
  return tp.materialize(owner, 2 * uint64_t{size} + kExtraCopyBytes);
}

// The pre-1.6 format: pickles for the magic number, protocol version, system info, the object
// and the storage keys, then each storage as an int64 element count and its raw bytes.
TensorMap parse_legacy(const uint8_t* data, size_t size, const std::shared_ptr<void>& owner,
                       const std::string& what) {
  static const uint8_t kMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  const pickle::Hooks none;
  size_t pos = 0;
  auto next = [&](const pickle::Hooks& hooks) {
    pickle::Result r = pickle::unpickle(data + pos, size - pos, hooks, what);
    pos += r.consumed;
    return r;
  };
  pickle::Result magic = next(none);
  if (magic.root->kind != Kind::Int || !magic.root->big ||
      magic.root->s != std::string(reinterpret_cast<const char*>(kMagic), sizeof kMagic))
    throw Error(what + ": not a torch checkpoint (a pickle without torch's magic number)");
  pickle::Result version = next(none);
  if (version.root->kind != Kind::Int || version.root->i != 1001)
    throw Error(what + ": unsupported legacy torch format version");
  pickle::Result info = next(none);
  const Value* little = pickle::dict_get(*info.root, "little_endian");
  if (little && little->kind == Kind::Bool && !little->b)
    throw Error(what + ": checkpoint was saved big-endian; only little-endian is supported");

  TorchPickle tp(what);
  tp.load(data + pos, size - pos);
  pos += tp.consumed();
  pickle::Result keys = next(none);
  if (keys.root->kind != Kind::List)
    throw Error(what + ": legacy torch checkpoint has no storage key list");
  for (const Value* k : keys.root->items) {
    auto it = k->kind == Kind::Str ? tp.storages().find(k->s) : tp.storages().end();
    if (it == tp.storages().end())
      throw Error(what + ": legacy torch checkpoint lists a storage no tensor uses");
    Storage& s = *it->second;
    if (s.data) throw Error(what + ": legacy torch checkpoint lists storage " + s.key + " twice");
    if (size - pos < 8)
      throw Error(what + ": legacy torch checkpoint ends early; the file may be truncated");
    const uint64_t numel = le64(data + pos);
    if (numel != s.numel)
      throw Error(what + ": storage " + s.key + " has " + std::to_string(numel) +
                  " elements in the file but " + std::to_string(s.numel) + " in its header");
    pos += 8;
    if (storage_bytes(s) > size - pos)
      throw Error(what + ": legacy torch checkpoint ends early; the file may be truncated");
    s.data = data + pos;
    s.nbytes = storage_bytes(s);
    pos += s.nbytes;
  }
  for (auto& [key, s] : tp.storages())
    if (!s->data) throw Error(what + ": legacy torch checkpoint lacks the data of storage " + key);
  return tp.materialize(owner, 2 * uint64_t{size} + kExtraCopyBytes);
}

}  // namespace

TensorMap parse_torch_checkpoint(const uint8_t* data, size_t size, std::shared_ptr<void> owner,
                                 const std::string& what) {
  if (size >= 4 && data[0] == 'P' && data[1] == 'K' &&
      ((data[2] == 3 && data[3] == 4) || (data[2] == 5 && data[3] == 6)))
    return parse_zip(data, size, owner, what);
  if (size >= 2 && data[0] == 0x80) return parse_legacy(data, size, owner, what);
  if (size >= 262 && std::memcmp(data + 257, "ustar", 5) == 0)
    throw Error(what +
                ": checkpoint uses torch's pre-1.0 tar format; re-save it with a current "
                "torch.save");
  throw Error(what + ": not a torch checkpoint (neither a zip archive nor a pickle)");
}

TensorMap read_torch_checkpoint(const std::string& path) {
  MappedFile f = map_file(path);
  return parse_torch_checkpoint(f.data, f.size, f.owner, path);
}

TensorMap parse_torch_pickle(const uint8_t* data, size_t size, const std::string& what) {
  // Stand-in storage bytes: static, so the returned views never dangle.
  alignas(64) static const uint8_t kZeros[4096] = {};
  TorchPickle tp(what);
  tp.load(data, size);
  for (auto& [key, s] : tp.storages()) {
    s->data = kZeros;
    s->nbytes = std::min<uint64_t>(storage_bytes(*s), sizeof kZeros);
  }
  return tp.materialize(nullptr, 16u << 20);
}

}  // namespace lingbot
