#include "cli/mcp/stdio_server.hpp"

#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

namespace kiln::cli::mcp {

using common::Status;

Status StdioServer::Run() {
  std::vector<std::thread> callers;
  callers.reserve(static_cast<size_t>(parallel_calls_));
  for (int i = 0; i < parallel_calls_; ++i) callers.emplace_back([this] { CallLoop(); });

  Status read_error;
  std::string pending;    // the unfinished line
  bool skipping = false;  // inside a line that was too long
  char buf[64 * 1024];
  while (true) {
    {
      std::lock_guard lock(write_mu_);
      if (!write_error_.ok()) break;  // nobody is listening any more
    }
    ssize_t n = read(in_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      read_error = common::ErrnoStatus("reading MCP messages", errno);
      break;
    }
    if (n == 0) break;  // EOF: the client is done
    std::string_view chunk(buf, static_cast<size_t>(n));
    while (!chunk.empty()) {
      auto nl = chunk.find('\n');
      std::string_view piece = chunk.substr(0, nl);
      if (!skipping) {
        if (pending.size() + piece.size() > kMaxLineBytes) {
          Write(EncodeLine(ErrorResponse(nullptr, {kInvalidRequest,
                                                   "Invalid Request: message longer than " +
                                                       std::to_string(kMaxLineBytes) + " bytes",
                                                   nullptr})));
          pending.clear();
          skipping = true;
        } else {
          pending.append(piece);
        }
      }
      if (nl == std::string_view::npos) break;
      if (!skipping) OnLine(pending);
      pending.clear();
      skipping = false;
      chunk.remove_prefix(nl + 1);
    }
  }
  if (!skipping && !pending.empty()) OnLine(pending);  // a last line without "\n"

  {
    std::lock_guard lock(queue_mu_);
    closing_ = true;
  }
  queue_changed_.notify_all();
  for (auto& t : callers) t.join();
  if (!read_error.ok()) return read_error;
  std::lock_guard lock(write_mu_);
  return write_error_;
}

void StdioServer::OnLine(std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank
  DecodedLine in = DecodeLine(line);
  if (!in.ok()) return Write(EncodeLine(ErrorResponse(in.error_id, in.error)));
  if (in.message->kind == Message::Kind::kRequest && in.message->method == "tools/call") {
    return Enqueue(std::move(*in.message));
  }
  if (in.message->kind == Message::Kind::kNotification &&
      in.message->method == "notifications/cancelled" && in.message->params.is_object()) {
    // A call still waiting for a caller thread is dropped unanswered; one
    // that runs is cancelled by the server.
    const auto id = in.message->params.value("requestId", nlohmann::json());
    std::lock_guard lock(queue_mu_);
    std::erase_if(queue_, [&](const Message& m) { return m.id == id; });
  }
  if (auto reply = server_->Handle(*in.message)) Write(EncodeLine(*reply));
}

void StdioServer::Enqueue(Message message) {
  std::unique_lock lock(queue_mu_);
  queue_changed_.wait(lock,
                      [this] { return queue_.size() < static_cast<size_t>(parallel_calls_); });
  queue_.push_back(std::move(message));
  lock.unlock();
  queue_changed_.notify_all();
}

void StdioServer::CallLoop() {
  while (true) {
    std::unique_lock lock(queue_mu_);
    queue_changed_.wait(lock, [this] { return !queue_.empty() || closing_; });
    if (queue_.empty()) return;  // closing and nothing left
    Message message = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    queue_changed_.notify_all();  // room for the reader
    if (auto reply = server_->Handle(message)) Write(EncodeLine(*reply));
  }
}

void StdioServer::Write(const std::string& line) {
  std::lock_guard lock(write_mu_);
  if (!write_error_.ok()) return;
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = write(out_fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      write_error_ = common::ErrnoStatus("writing MCP messages", errno);
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace kiln::cli::mcp
