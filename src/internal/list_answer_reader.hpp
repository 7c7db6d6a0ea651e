// ListAnswerReader: reads a server answer of the shape {"<field>": [element, ...], ...} with
// RapidJSON's SAX reader, handing each element to a sink, without building a DOM. The client's
// allocate, exists and locations decoders use it for every answer that the fast path
// (compact_json.hpp) does not recognise, and so for every answer they refuse.
//
// Judgements are deferred to the end of the parse, so that the messages are those a whole-document
// check gives, in this order: not JSON; not an object; field missing; field not a list; wrong number
// of entries; the first bad element. Other members are skipped; with a repeated field, the last one
// counts (as Python's json.loads keeps it).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "internal/json.hpp"

#include <rapidjson/reader.h>

namespace hf3fs_meta::internal {

// One JSON value as an element (or a member of an element) of the list.
struct Scalar {
  enum class Kind { null, boolean, integer, big_integer, real, string, container };
  Scalar() = default;
  explicit Scalar(Kind k) : kind(k) {}
  Kind kind = Kind::null;
  bool boolean = false;
  std::int64_t integer = 0;
  std::string_view string;  // points into the in-place parsed copy
};

// A sink provides:
//   void reset();                                        // the field (again): forget earlier elements
//   void element(std::size_t index, const Scalar&);      // an element that is a scalar
//   void begin(std::size_t index, bool is_array);        // an element that is a list or an object
//   void item(std::size_t index, std::size_t position, const Scalar&);  // a value inside it
//   void end(std::size_t index, std::size_t count);      // its end, with its number of values
//   std::optional<std::string> error();                  // the first bad element's message
template <class Sink>
class ListAnswerReader : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, ListAnswerReader<Sink>> {
 public:
  ListAnswerReader(std::string_view field, Sink& sink) : field_(field), sink_(sink) {}

  // The error message, or nullopt when the answer has the shape and `expected` entries.
  std::optional<std::string> read(std::string_view body, std::size_t expected) {
    if (std::string error = precheck_body(body); !error.empty()) return "answer: not JSON (" + error + ")";
    InsituCopy copy(body);
    rapidjson::InsituStringStream stream(copy.data());
    rapidjson::Reader reader;
    const rapidjson::ParseResult result = reader.Parse<rapidjson::kParseInsituFlag | rapidjson::kParseIterativeFlag>(stream, *this);
    if (result.IsError()) return "answer: not JSON (" + parse_error_text(result.Code(), result.Offset()) + ")";
    const std::string field(field_);
    if (!root_is_object_) return std::string("answer: expected a JSON object");
    if (!field_seen_) return field + ": missing from the answer";
    if (!field_is_list_) return field + ": expected a list";
    if (count_ != expected) {
      return field + ": expected " + std::to_string(expected) + " entries (one per key sent), got " +
             std::to_string(count_);
    }
    return sink_.error();
  }

  // ---- RapidJSON SAX events ----
  bool Null() { return value(Scalar{}); }
  bool Bool(bool b) {
    Scalar s{Scalar::Kind::boolean};
    s.boolean = b;
    return value(s);
  }
  bool Int(int i) { return integer(i); }
  bool Uint(unsigned u) { return integer(u); }
  bool Int64(std::int64_t i) { return integer(i); }
  bool Uint64(std::uint64_t u) {
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return value(Scalar{Scalar::Kind::big_integer});
    }
    return integer(static_cast<std::int64_t>(u));
  }
  bool Double(double) { return value(Scalar{Scalar::Kind::real}); }
  bool String(const char* text, rapidjson::SizeType length, bool) {
    Scalar s{Scalar::Kind::string};
    s.string = std::string_view(text, length);
    return value(s);
  }
  bool Key(const char* text, rapidjson::SizeType length, bool) {
    if (depth_ == 1 && root_is_object_) next_is_field_ = std::string_view(text, length) == field_;
    return true;
  }
  bool StartObject() { return open(false); }
  bool StartArray() { return open(true); }
  bool EndObject(rapidjson::SizeType) { return close(); }
  bool EndArray(rapidjson::SizeType) { return close(); }

 private:
  // Depths: 1 inside the root object, 2 directly inside the field's list, 3 inside an element.
  bool integer(std::int64_t i) {
    Scalar s{Scalar::Kind::integer};
    s.integer = i;
    return value(s);
  }

  bool value(const Scalar& s) {
    if (in_list_ && depth_ == 2) {
      sink_.element(index_++, s);
    } else if (in_list_ && depth_ == 3) {
      sink_.item(index_, position_++, s);
    } else if (depth_ == 1 && next_is_field_) {
      field_found(false);
    }
    return true;
  }

  bool open(bool is_array) {
    if (depth_ == 0) {
      root_is_object_ = !is_array;
    } else if (depth_ == 1 && next_is_field_) {
      field_found(is_array);
      if (is_array) {
        in_list_ = true;
        ++depth_;
        return true;
      }
    } else if (in_list_ && depth_ == 2) {
      sink_.begin(index_, is_array);
      position_ = 0;
    } else if (in_list_ && depth_ == 3) {
      sink_.item(index_, position_++, Scalar{Scalar::Kind::container});
    }
    ++depth_;
    return true;
  }

  bool close() {
    --depth_;
    if (in_list_ && depth_ == 1) {
      in_list_ = false;
      count_ = index_;
    } else if (in_list_ && depth_ == 2) {
      sink_.end(index_++, position_);
    }
    return true;
  }

  void field_found(bool is_list) {
    next_is_field_ = false;
    field_seen_ = true;
    field_is_list_ = is_list;
    index_ = 0;
    count_ = 0;
    sink_.reset();
  }

  std::string_view field_;
  Sink& sink_;
  int depth_ = 0;
  bool root_is_object_ = false;
  bool next_is_field_ = false;
  bool field_seen_ = false;
  bool field_is_list_ = false;
  bool in_list_ = false;
  std::size_t index_ = 0;     // elements seen in the list
  std::size_t position_ = 0;  // values seen in the current element
  std::size_t count_ = 0;     // elements in the list, once closed
};

}  // namespace hf3fs_meta::internal
