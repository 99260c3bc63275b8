// kiln-sandbox-bench: what a sandboxed cold start costs next to a bare one.
//
//   kiln-sandbox-bench [runs=30] [cgroup_mode=auto] [relax=layer,layer...]
// (layers this host may lack, as sandbox.relax; a layer the host has stays on)
//
// For python3 -c pass, node -e 0 and bash -c true: median and p90 of
// (a) bare posix_spawn + wait with a clean environment and (b) Sandbox::Spawn
// + Wait, and their ratio; plus Spawn alone (until the sandboxed program runs:
// Spawn returns after execve) so the warm-pool cost is known.
// Then a python one-shot job (`pass`, through the real wrapper) from spawn to
// exit, exec'd and forked from the zygote, against bare `python3 -c pass`;
// and how many jobs per second 4 concurrent loops run, exec'd and zygote-born;
// and what creating and removing a sandbox's cgroups costs, new or pooled,
// and what loading its seccomp filters costs.
#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "worker/runtimes/runtime.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/sandbox.hpp"
#include "worker/sandbox/seccomp_policy.hpp"

using namespace kiln::worker::sandbox;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Stats {
  double median, p90;
};
Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)]};
}

double Bare(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char path[] = "PATH=/usr/bin:/bin";
  char* envp[] = {path, nullptr};
  auto t0 = Clock::now();
  pid_t pid;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp) != 0) return -1;
  int st;
  waitpid(pid, &st, 0);
  return Ms(t0, Clock::now());
}

bool Sandboxed(Sandbox& sb, const std::vector<std::string>& args, double* total, double* spawn) {
  SpawnSpec spec;
  spec.argv = args;
  spec.env = {"PATH=/usr/bin:/bin"};
  auto t0 = Clock::now();
  auto p = sb.Spawn(std::move(spec));
  auto t1 = Clock::now();
  if (!p.ok()) {
    std::fprintf(stderr, "spawn: %s\n", p.status().ToString().c_str());
    return false;
  }
  auto st = (*p)->Wait();
  auto t2 = Clock::now();
  *spawn = Ms(t0, t1);
  *total = Ms(t0, t2);
  p->reset();  // teardown (unmount, rmdir cgroups) is not on the job's path
  return st.ok();
}

// One python one-shot job with the code `pass`: spawn (from the zygote when
// `zygote`), write its frame, wait for the exit. Stdout/stderr/control go to
// pipes nobody reads (the job writes a few bytes). Fills spawn and total.
bool PythonJob(Sandbox& sb, const kiln::worker::runtimes::Runtime& rt, bool zygote, double* total,
               double* spawn) {
  auto launch = rt.OneShotLaunch();
  SpawnSpec spec;
  spec.argv = launch.argv;
  spec.env = launch.env;
  if (zygote) spec.zygote_argv = launch.zygote_argv;
  int in[2], out[2], ctl[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(ctl, O_CLOEXEC) != 0)
    return false;
  spec.stdin_fd = kiln::common::UniqueFd(in[0]);
  spec.stdout_fd = kiln::common::UniqueFd(out[1]);
  spec.control_fd = kiln::common::UniqueFd(ctl[1]);
  kiln::common::UniqueFd in_w(in[1]), out_r(out[0]), ctl_r(ctl[0]);
  auto frame = rt.EncodeJob("pass", "", {});
  auto t0 = Clock::now();
  auto p = sb.Spawn(std::move(spec));
  auto t1 = Clock::now();
  if (!p.ok() || !frame.ok()) {
    std::fprintf(stderr, "spawn: %s\n", p.status().ToString().c_str());
    return false;
  }
  if (::write(in_w.get(), frame->data(), frame->size()) != static_cast<ssize_t>(frame->size()))
    return false;
  in_w.Reset();
  auto st = (*p)->Wait();
  *spawn = Ms(t0, t1);
  *total = Ms(t0, Clock::now());
  p->reset();
  return st.ok() && st->exit_code == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 30;
  SandboxConfig config;
  config.init_path = KILN_BINARY_DIR "/bin/kiln-init";
  config.state_dir = "/tmp/kiln-sandbox-bench";
  config.cgroup_prefix = "kiln-bench";
  config.cgroup_mode = argc > 2 ? argv[2] : "auto";
  config.uid_base = 330000;
  if (argc > 3) {
    std::string list = argv[3];
    for (size_t start = 0; start <= list.size();) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      if (comma > start) config.relaxed_layers.insert(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  auto t0 = Clock::now();
  auto sb = Sandbox::Create(config);
  if (!sb.ok()) {
    std::fprintf(stderr, "Sandbox::Create: %s\n", sb.status().ToString().c_str());
    return 1;
  }
  std::printf("Sandbox::Create (host probe) %.1f ms; layers:", Ms(t0, Clock::now()));
  for (const auto& l : (*sb)->ActiveLayers()) std::printf(" %s", l.c_str());
  std::printf("\nruns=%d\n\n%-22s %10s %10s %10s %10s %7s %10s %10s\n", runs, "program", "bare p50",
              "bare p90", "sbx p50", "sbx p90", "ratio", "spawn p50", "spawn p90");
  const std::vector<std::vector<std::string>> programs = {{"/usr/bin/python3", "-c", "pass"},
                                                          {"/usr/bin/node", "-e", "0"},
                                                          {"/bin/bash", "-c", "true"},
                                                          {"/bin/true"}};
  for (const auto& prog : programs) {
    std::vector<double> bare, total, spawn;
    Bare(prog);  // warm the page cache
    double tt, ss;
    Sandboxed(**sb, prog, &tt, &ss);
    for (int i = 0; i < runs; ++i) {
      bare.push_back(Bare(prog));
      if (!Sandboxed(**sb, prog, &tt, &ss)) return 1;
      total.push_back(tt);
      spawn.push_back(ss);
    }
    Stats b = Summarize(bare), t = Summarize(total), s = Summarize(spawn);
    std::string name;
    for (const auto& a : prog) name += (name.empty() ? "" : " ") + a.substr(a.rfind('/') + 1);
    std::printf("%-22s %8.2fms %8.2fms %8.2fms %8.2fms %6.2fx %8.2fms %8.2fms\n", name.c_str(),
                b.median, b.p90, t.median, t.p90, t.median / b.median, s.median, s.p90);
  }

  auto rt = kiln::worker::runtimes::Runtime::Create(kiln::worker::runtimes::Language::kPython,
                                                    kiln::worker::runtimes::RuntimePaths{});
  if (!rt.ok()) return 1;
  std::printf(
      "\npython one-shot job `pass` (wrapper), spawn to exit, against bare python3 -c pass\n");
  for (bool zygote : {false, true}) {
    std::vector<double> bare, total, spawn;
    double tt, ss;
    if (!PythonJob(**sb, *rt, zygote, &tt, &ss)) return 1;  // starts the zygote
    for (int i = 0; i < runs; ++i) {
      bare.push_back(Bare(programs[0]));
      if (!PythonJob(**sb, *rt, zygote, &tt, &ss)) return 1;
      total.push_back(tt);
      spawn.push_back(ss);
    }
    Stats b = Summarize(bare), t = Summarize(total), s = Summarize(spawn);
    std::printf("%-22s %8.2fms %8.2fms %8.2fms %8.2fms %6.2fx %8.2fms %8.2fms\n",
                zygote ? "job, zygote" : "job, exec", b.median, b.p90, t.median, t.p90,
                t.median / b.median, s.median, s.p90);
  }
  // What a sandbox's cgroup costs the spawning thread, no process inside:
  // a new one (mkdir and limits in every hierarchy, then rmdir: a session's,
  // `freezable`) against a pooled one (taken from the pool, checked empty,
  // reset, limits written; given back).
  {
    auto manager = CgroupManager::Create({config.cgroup_mode, "kiln-bench-cg", 1000});
    for (bool pooled : {false, true}) {
      if (!manager.ok()) break;
      std::vector<double> create, destroy;
      for (int i = 0; i < runs * 4; ++i) {
        auto t0 = Clock::now();
        auto cg = (*manager)->CreateFor("bench-" + std::to_string(i), SandboxLimits{}, !pooled);
        auto t1 = Clock::now();
        if (!cg.ok()) break;
        (void)(*cg)->Destroy();
        create.push_back(Ms(t0, t1));
        destroy.push_back(Ms(t1, Clock::now()));
      }
      if (!create.empty()) {
        std::printf("%scgroup (%s, %s) create p50 %.3f ms, destroy p50 %.3f ms\n",
                    pooled ? "" : "\n", (*manager)->version().c_str(), pooled ? "pooled" : "new",
                    Summarize(create).median, Summarize(destroy).median);
      }
    }
  }
  // What installing the two seccomp filters costs a sandbox's contain steps
  // (in a fresh child each time, as a sandbox does; the kernel checks, JITs
  // and emulates each filter for every syscall number at load).
  if (auto filters = CompileSeccompFilters(); filters.ok()) {
    std::vector<double> first, second;
    for (int i = 0; i < runs * 4; ++i) {
      int p[2];
      if (::pipe(p) != 0) break;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        double ms[2];
        auto t0 = Clock::now();
        int listener = -1;
        LoadSeccompFilter(filters->syscalls.data(),
                          static_cast<unsigned short>(filters->syscalls.size()), &listener);
        auto t1 = Clock::now();
        LoadSeccompFilter(filters->arguments.data(),
                          static_cast<unsigned short>(filters->arguments.size()));
        ms[0] = Ms(t0, t1);
        ms[1] = Ms(t1, Clock::now());
        (void)!::write(p[1], ms, sizeof ms);
        ::_exit(0);
      }
      double ms[2] = {0, 0};
      if (pid > 0 && ::read(p[0], ms, sizeof ms) == sizeof ms) {
        first.push_back(ms[0]);
        second.push_back(ms[1]);
      }
      ::close(p[0]);
      ::close(p[1]);
      if (pid > 0) ::waitpid(pid, nullptr, 0);
    }
    if (!first.empty()) {
      std::printf(
          "seccomp: syscall filter (%zu insns, with listener) load p50 %.3f ms, "
          "argument filter (%zu insns) p50 %.3f ms\n",
          filters->syscalls.size(), Summarize(first).median, filters->arguments.size(),
          Summarize(second).median);
    }
  }
  // Throughput: `threads` loops, each running zygote-born jobs back to back.
  const int threads = 4;
  const auto window = std::chrono::seconds(3);
  for (bool zygote : {false, true}) {
    std::atomic<int> done{0};
    std::atomic<bool> failed{false};
    auto end = Clock::now() + window;
    std::vector<std::thread> loops;
    for (int i = 0; i < threads; ++i) {
      loops.emplace_back([&] {
        double tt, ss;
        while (Clock::now() < end) {
          if (!PythonJob(**sb, *rt, zygote, &tt, &ss)) {
            failed = true;
            return;
          }
          ++done;
        }
      });
    }
    for (auto& t : loops) t.join();
    if (failed) return 1;
    std::printf("%s: %d concurrent loops, %.1f jobs/s\n", zygote ? "zygote" : "exec", threads,
                done.load() / std::chrono::duration<double>(window).count());
  }
  return 0;
}
