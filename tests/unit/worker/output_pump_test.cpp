// OutputPump on real pipes: streamed output is coalesced into chunks of up to
// kMaxChunkBytes or kChunkFlushInterval, whatever a job's write() pattern,
// with dense seq, contiguous per-stream offsets, chunks that add up to the
// kept output, and secrets masked across every flush and chunk boundary.
#include "worker/executor/output_pump.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"

namespace kiln::worker {
namespace {

namespace protocol = common::protocol;
using common::SteadyClock;
using protocol::Stream;
using namespace std::chrono_literals;

constexpr const char* kSecret = "s3cret-Token-Value-42";

// A pump fed through two real pipes, collecting what it streams.
class PumpHarness {
 public:
  explicit PumpHarness(bool stream_output = true, std::vector<std::string> secrets = {kSecret}) {
    job_.job_id = "job-1";
    job_.stream_output = stream_output;
    job_.secrets = std::move(secrets);
    job_.limits.max_output_bytes = 64u << 20;
    options_.max_output_bytes = 64u << 20;
    options_.on_chunk = [this](protocol::OutputChunk c) { chunks_.push_back(std::move(c)); };
    auto policy = PolicyFor(job_);
    EXPECT_TRUE(policy.ok()) << policy.status().ToString();
    pump_ = std::make_unique<OutputPump>(job_, options_, *policy);
    for (auto* p : {&out_, &err_}) {
      int fds[2];
      EXPECT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
      p->r = common::UniqueFd(fds[0]);
      p->w = common::UniqueFd(fds[1]);
    }
  }

  // Writes `data` into the stream's pipe and pumps until the pump has read it all.
  void Feed(Stream s, std::string_view data) {
    Pipe& p = pipe(s);
    while (!data.empty()) {
      ssize_t n = ::write(p.w.get(), data.data(), data.size());
      ASSERT_GT(n, 0);
      data.remove_prefix(static_cast<size_t>(n));
      ASSERT_TRUE(pump_->ReadOutput(p.r.get(), s, &p.kept));
    }
  }
  // End of the stream (EOF on its pipe).
  void Close(Stream s) {
    Pipe& p = pipe(s);
    p.w.Reset();
    while (pump_->ReadOutput(p.r.get(), s, &p.kept)) {
    }
  }

  // The stream ends without EOF (the job was killed).
  void FinishOpen(Stream s) { pump_->FinishOpen(s, &pipe(s).kept); }

  OutputPump& pump() { return *pump_; }
  const std::vector<protocol::OutputChunk>& chunks() const { return chunks_; }
  const std::string& kept(Stream s) { return pipe(s).kept; }
  size_t Count(Stream s) const {
    size_t n = 0;
    for (const auto& c : chunks_) n += c.stream == s;
    return n;
  }
  std::string Streamed(Stream s) const {
    std::string out;
    for (const auto& c : chunks_) {
      if (c.stream == s) out += c.data;
    }
    return out;
  }

  // seq dense from 0 across both streams, offsets contiguous per stream,
  // every chunk non-empty and within kMaxChunkBytes, and the chunks of each
  // stream adding up to what the pump kept.
  void ExpectWellFormed() {
    uint64_t offset[2] = {0, 0};
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const auto& c = chunks_[i];
      const size_t s = c.stream == Stream::kStdout ? 0 : 1;
      EXPECT_EQ(c.job_id, "job-1");
      EXPECT_EQ(c.seq, i);
      EXPECT_EQ(c.offset, offset[s]) << "chunk " << i;
      EXPECT_FALSE(c.data.empty()) << "chunk " << i;
      EXPECT_LE(c.data.size(), protocol::kMaxChunkBytes) << "chunk " << i;
      offset[s] += c.data.size();
    }
    EXPECT_EQ(Streamed(Stream::kStdout), kept(Stream::kStdout));
    EXPECT_EQ(Streamed(Stream::kStderr), kept(Stream::kStderr));
  }

 private:
  struct Pipe {
    common::UniqueFd r, w;
    std::string kept;
  };
  Pipe& pipe(Stream s) { return s == Stream::kStdout ? out_ : err_; }

  protocol::Execute job_;
  RunOptions options_;
  std::vector<protocol::OutputChunk> chunks_;
  std::unique_ptr<OutputPump> pump_;
  Pipe out_, err_;
};

// A job doing one-byte writes: the number of chunks follows the run time
// (one per kChunkFlushInterval per stream at most), not the number of writes.
TEST(OutputPump, TinyWritesAreCoalescedByTime) {
  PumpHarness h;
  const auto start = SteadyClock::now();
  size_t writes = 0;
  while (SteadyClock::now() - start < 300ms) {
    h.Feed(Stream::kStdout, "o");
    if (writes % 3 == 0) h.Feed(Stream::kStderr, "e");
    h.pump().FlushDue(SteadyClock::now());
    ++writes;
  }
  h.Close(Stream::kStdout);
  h.Close(Stream::kStderr);
  h.pump().FlushAll();
  const auto elapsed = SteadyClock::now() - start;
  // Each stream: one chunk per interval at most, plus the last one at EOF.
  const size_t bound = static_cast<size_t>(elapsed / kChunkFlushInterval) + 2;
  ASSERT_GT(writes, 500u) << "the loop must really make many writes";
  EXPECT_LE(h.Count(Stream::kStdout), bound) << writes << " writes";
  EXPECT_LE(h.Count(Stream::kStderr), bound) << writes << " writes";
  EXPECT_GE(h.Count(Stream::kStdout), 2u) << "output must leave while the job runs";
  EXPECT_EQ(h.kept(Stream::kStdout).size(), writes);
  h.ExpectWellFormed();
}

// A burst leaves in full chunks of kMaxChunkBytes, whatever the read sizes.
TEST(OutputPump, BulkOutputLeavesInFullChunks) {
  PumpHarness h;
  std::string line = "line of output text 0123456789\n";
  std::string data;
  while (data.size() < 300 * 1024) data += line;
  data.resize(300 * 1024);
  for (size_t at = 0; at < data.size(); at += 7000) {
    h.Feed(Stream::kStdout, std::string_view(data).substr(at, 7000));
  }
  EXPECT_EQ(h.chunks().size(), 4u) << "four full chunks before the end";
  for (const auto& c : h.chunks()) EXPECT_EQ(c.data.size(), protocol::kMaxChunkBytes);
  h.Close(Stream::kStdout);
  ASSERT_EQ(h.chunks().size(), 5u);
  EXPECT_EQ(h.chunks().back().data.size(), data.size() - 4 * protocol::kMaxChunkBytes);
  EXPECT_EQ(h.kept(Stream::kStdout), data);
  h.ExpectWellFormed();
}

// Quiet output still leaves once its oldest byte is kChunkFlushInterval old.
TEST(OutputPump, FlushesByTime) {
  PumpHarness h;
  const auto before = SteadyClock::now();
  h.Feed(Stream::kStdout, "hello ");
  auto due = h.pump().NextFlush();
  ASSERT_TRUE(due.has_value());
  EXPECT_GE(*due, before + kChunkFlushInterval);
  EXPECT_LE(*due, SteadyClock::now() + kChunkFlushInterval);
  h.Feed(Stream::kStdout, "world");
  EXPECT_EQ(h.pump().NextFlush(), due) << "the oldest byte sets the deadline";
  h.pump().FlushDue(*due - 1ms);
  EXPECT_TRUE(h.chunks().empty());
  h.pump().FlushDue(*due);
  ASSERT_EQ(h.chunks().size(), 1u);
  EXPECT_EQ(h.chunks()[0].data, "hello world");
  EXPECT_FALSE(h.pump().NextFlush().has_value());
  // The runners' poll timeout: a real wait until the deadline, then a flush.
  h.Feed(Stream::kStderr, "late");
  while (SteadyClock::now() < *h.pump().NextFlush()) std::this_thread::sleep_for(1ms);
  h.pump().FlushDue(SteadyClock::now());
  ASSERT_EQ(h.chunks().size(), 2u);
  EXPECT_EQ(h.chunks()[1].data, "late");
  EXPECT_EQ(h.chunks()[1].offset, 0u);
  EXPECT_EQ(h.chunks()[1].seq, 1u);
  h.ExpectWellFormed();
}

// A secret split by a time flush, and one straddling a chunk boundary of the
// raw output, are masked: the filter sits before the buffer.
TEST(OutputPump, MasksSecretsAcrossFlushesAndChunks) {
  PumpHarness h;
  const std::string secret = kSecret;
  // Raw offset kMaxChunkBytes falls inside the secret.
  std::string first(protocol::kMaxChunkBytes - 5, 'a');
  first += secret.substr(0, 9);
  h.Feed(Stream::kStdout, first);
  h.pump().FlushDue(SteadyClock::now() + 1h);  // a time flush mid-secret
  h.Feed(Stream::kStdout, secret.substr(9) + " and again " + secret.substr(0, 4));
  h.pump().FlushDue(SteadyClock::now() + 1h);
  h.Feed(Stream::kStdout, secret.substr(4) + " end\n");
  h.Close(Stream::kStdout);

  const std::string expected =
      std::string(protocol::kMaxChunkBytes - 5, 'a') + "*** and again *** end\n";
  EXPECT_EQ(h.kept(Stream::kStdout), expected);
  EXPECT_EQ(h.pump().redactions(), 2u);
  ASSERT_GE(h.chunks().size(), 3u);
  for (const auto& c : h.chunks()) {
    for (size_t n = 5; n <= secret.size(); ++n) {
      EXPECT_EQ(c.data.find(secret.substr(0, n)), std::string::npos)
          << "chunk " << c.seq << " holds a secret prefix of " << n << " bytes";
    }
  }
  h.ExpectWellFormed();
}

// Streams of a job killed before EOF end with FinishOpen, which sends the rest.
TEST(OutputPump, FinishOpenSendsTheRest) {
  PumpHarness h;
  h.Feed(Stream::kStdout, "partial");
  h.Feed(Stream::kStderr, "err");
  h.FinishOpen(Stream::kStdout);
  ASSERT_EQ(h.chunks().size(), 1u);
  EXPECT_EQ(h.chunks()[0].data, "partial");
  h.pump().FlushAll();
  ASSERT_EQ(h.chunks().size(), 2u);
  EXPECT_EQ(h.chunks()[1].data, "err");
  h.ExpectWellFormed();
}

// Without stream_output nothing is streamed or buffered; output is kept.
TEST(OutputPump, NoChunksWithoutStreaming) {
  PumpHarness h(/*stream_output=*/false);
  h.Feed(Stream::kStdout, "quiet");
  EXPECT_FALSE(h.pump().NextFlush().has_value());
  h.Close(Stream::kStdout);
  h.pump().FlushAll();
  EXPECT_TRUE(h.chunks().empty());
  EXPECT_EQ(h.kept(Stream::kStdout), "quiet");
}

}  // namespace
}  // namespace kiln::worker
