// The wire format between TCPStore clients and their server. Internal to
// parallel/.
//
// Every message is a frame: a 4-byte little-endian payload length, then the
// payload. A request payload is a command byte and its fields; a reply is a
// status byte and its fields. Fields: u8, i64 (8 bytes little-endian), bytes
// (u32 length + the bytes), a key list (u32 count + that many bytes fields).
//
//   request                      reply
//   Hello  magic                 Ok magic
//   Set    key value             Ok
//   Get    key timeout_ms        Value value | Timeout
//   Add    key delta             Int new_value | Error text
//   CompareSet key exp desired   Value current
//   Wait   keys timeout_ms       Ok | Timeout missing_keys
//   Check  keys                  Int 0/1
//   Delete key                   Int 0/1
//   NumKeys                      Int n
//
// The server answers requests of one connection in order; Get and Wait are
// answered when their keys exist or their timeout passes (the server keeps
// the clock, so a client never has an answer in flight after giving up).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::parallel::detail {

// Sent first by every client: a program that is not an ember store (or a
// store of another protocol version) is recognized at once.
inline constexpr std::string_view kStoreMagic = "ember-store/1";
// Larger frames are refused: a stray client that writes text or garbage does
// not make the server allocate gigabytes.
inline constexpr uint32_t kMaxStoreFrame = 1u << 30;

enum class StoreCommand : uint8_t { Hello = 1, Set, Get, Add, CompareSet, Wait, Check, Delete, NumKeys };
enum class StoreStatus : uint8_t { Ok = 1, Value, Int, Timeout, Error };

// Builds one frame.
class FrameWriter {
 public:
  FrameWriter() : buf_(4, '\0') {}
  FrameWriter& u8(uint8_t v);
  FrameWriter& i64(int64_t v);
  FrameWriter& bytes(std::string_view v);
  FrameWriter& keys(const std::vector<std::string>& v);
  // The frame with its length filled in.
  std::string finish();

 private:
  std::string buf_;
};

// Reads the fields of one payload; a field that runs past the end is an
// ember::Error ("truncated store message").
class FrameReader {
 public:
  explicit FrameReader(std::string_view payload) : rest_(payload) {}
  uint8_t u8();
  int64_t i64();
  std::string bytes();
  std::vector<std::string> keys();
  bool done() const { return rest_.empty(); }

 private:
  std::string_view take(size_t n);
  std::string_view rest_;
};

// The payload length of a frame header (4 bytes, little-endian).
uint32_t frame_length(const char* header);

}  // namespace ember::parallel::detail
