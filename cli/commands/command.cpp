#include "cli/commands/command.hpp"

#include <cstdio>

#include "cli/exit_codes.hpp"

namespace kiln::cli {

int ReportError(const common::Status& status) {
  WriteErr("kiln: " + status.ToString() + "\n");
  return ExitCodeForStatus(status);
}

common::StatusOr<std::unique_ptr<ApiClient>> Connect(const GlobalFlags& globals, TokenRole role) {
  ASSIGN_OR_RETURN(ClientConfig config, LoadClientConfig(globals, role, EnvFromProcess()));
  return ApiClient::Create(config);
}

void WriteOut(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void WriteErr(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

std::string JsonText(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace kiln::cli
