#include "worker/executor/output_pump.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>

#include "common/rich_output.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker {

protocol::Result ErrorResult(const protocol::Execute& job, const common::Status& st) {
  protocol::Result r;
  r.job_id = job.job_id;
  r.reason = protocol::EndReason::kError;
  r.worker_error = st.ToString();
  r.worker_error_code = common::CodeName(st.code());
  return r;
}

bool ReadControl(int fd, std::string* dest) {
  std::array<char, kReadSize> buf;
  for (int reads = 0; reads < kMaxReadsPerWake; ++reads) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    size_t room = runtimes::Runtime::kMaxControlBytes + 1 -
                  std::min(dest->size(), runtimes::Runtime::kMaxControlBytes + 1);
    dest->append(buf.data(), std::min(room, static_cast<size_t>(n)));
  }
  return true;
}

common::StatusOr<std::shared_ptr<const common::SecretsPolicy>> PolicyFor(
    const protocol::Execute& job) {
  static const auto kPatternsOnly = common::SecretsPolicy::Create({});
  if (job.secrets.empty()) return kPatternsOnly;
  return common::SecretsPolicy::Create(job.secrets);
}

void FitToWire(protocol::Result* r) {
  auto cut = [](std::string* s, size_t max) {
    if (s->size() > max) s->resize(max);
  };
  if (r->result_json.size() > protocol::kMaxResultJsonBytes) {
    r->result_json.clear();
    if (!r->error) {
      r->error = protocol::ErrorInfo{
          "ResultTooLarge",
          "`result` is larger than " + std::to_string(protocol::kMaxResultJsonBytes) + " bytes",
          ""};
    }
  }
  if (r->error) {
    cut(&r->error->type, 256);
    cut(&r->error->message, protocol::kMaxStringBytes);
    cut(&r->error->traceback, protocol::kMaxStringBytes);
  }
  cut(&r->worker_error, protocol::kMaxStringBytes);
  if (r->stdout_data.size() > protocol::kMaxStreamBytes ||
      r->stderr_data.size() > protocol::kMaxStreamBytes) {
    r->truncated = true;
    cut(&r->stdout_data, protocol::kMaxStreamBytes);
    cut(&r->stderr_data, protocol::kMaxStreamBytes);
  }
  // Masking may have changed their sizes: bound them again.
  if (common::BoundRichOutputs(&r->outputs)) r->outputs_truncated = true;
  uint64_t total = 0;
  size_t keep = 0;
  for (; keep < r->files.size() && keep < protocol::kMaxFiles; ++keep) {
    total += r->files[keep].content.size();
    if (total > protocol::kMaxFilesBytes) break;
  }
  if (keep < r->files.size()) {
    r->files_truncated = true;
    r->files_omitted += static_cast<uint32_t>(r->files.size() - keep);
    r->files.resize(keep);
  }
}

void ApplyCollected(common::StatusOr<sandbox::CollectedFiles> collected,
                    const protocol::Execute& job, protocol::Result* r) {
  if (!collected.ok()) {
    r->files_truncated = true;
    r->stderr_data += "\n[kiln] collecting output files failed: " + collected.status().message();
    return;
  }
  if (!job.secrets.empty() && !collected->files.empty()) {
    auto secrets =
        common::SecretsPolicy::Create(job.secrets, common::SecretsPolicy::Patterns::kNone);
    for (auto& f : collected->files) {
      // PolicyFor accepted the same secrets, so this cannot fail; if it
      // did, no file may leave unmasked.
      if (!secrets.ok()) {
        f.content.clear();
        continue;
      }
      f.content = (*secrets)->Mask(f.content, &r->redactions);
    }
  }
  r->files = std::move(collected->files);
  r->files_omitted = collected->omitted;
  r->files_truncated = collected->truncated();
}

}  // namespace kiln::worker
