// `kiln keygen NAME`: writes a CURVE key pair for a worker or a broker link.
#include <filesystem>

#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "common/curve/curve_keys.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] =
    R"txt(Writes DIR/NAME.key (the secret key, mode 0600) and DIR/NAME.pub (the
public key), creating DIR if needed; refuses to overwrite either. A worker's NAME is the id it
registers as: copy NAME.pub into every broker's broker.workers.accepted_keys_dir
and give the worker NAME.key (worker.secret_key_file) and the broker's .pub
(worker.broker_key_file). Runs locally; talks to no broker.

Examples:
  kiln keygen broker --dir /etc/kiln/keys
  kiln keygen worker-17 --dir /etc/kiln/keys && cp /etc/kiln/keys/worker-17.pub /etc/kiln/workers.d/)txt";

struct KeygenFlags {
  std::string name;
  std::string dir = ".";
};

int Keygen(const KeygenFlags& flags) {
  std::error_code ec;
  std::filesystem::create_directories(flags.dir, ec);
  if (ec)
    return ReportError(common::InvalidRequest("cannot create " + flags.dir + ": " + ec.message()));
  auto keys = common::GenerateCurveKeyPair();
  if (!keys.ok()) return ReportError(keys.status());
  if (auto st = common::WriteCurveKeyFiles(flags.dir, flags.name, *keys); !st.ok()) {
    return ReportError(st);
  }
  WriteOut(flags.dir + "/" + flags.name + ".key\n" + flags.dir + "/" + flags.name + ".pub " +
           keys->public_z85 + "\n");
  return kExitOk;
}

}  // namespace

Command AddKeygenCommand(CLI::App& root) {
  auto flags = std::make_shared<KeygenFlags>();
  CLI::App* app = root.add_subcommand("keygen", "Write a CURVE key pair for the worker links");
  app->footer(kFooter);
  app->add_option("NAME", flags->name, "The key's name: the worker id, or e.g. 'broker'")
      ->required()
      ->type_name("NAME");
  app->add_option("--dir", flags->dir, "Where to write NAME.key and NAME.pub (default: .)")
      ->type_name("DIR");
  return {app, [flags] { return Keygen(*flags); }};
}

}  // namespace kiln::cli
