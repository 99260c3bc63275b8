// Sessions: EncodeExecution and ControlStream, then the real session drivers
// run by the real interpreters (no sandbox) through SessionProcess.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "tests/unit/runtimes/session_process.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker::runtimes {
namespace {

using common::Code;
using nlohmann::json;
using testing::Execution;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::SessionProcess;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using Env = std::map<std::string, std::string>;

constexpr Language kAll[] = {Language::kPython, Language::kJavaScript, Language::kShell};

Runtime Make(Language language) {
  auto rt = Runtime::Create(language, RuntimePaths{});
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return std::move(rt).value();
}

std::string Frame(const Runtime& rt, std::string_view code, std::string_view input = "",
                  const Env& env = {}, std::string_view stdin_data = {}) {
  auto frame = rt.EncodeExecution(code, input, env, stdin_data);
  EXPECT_TRUE(frame.ok()) << frame.status().ToString();
  return frame.ok() ? *frame : "";
}

// The outcome of an execution that must have produced a well-formed frame.
Runtime::Outcome OutcomeOf(const Execution& e) {
  EXPECT_FALSE(e.timed_out) << "no frame; stdout: " << e.stdout_data.substr(0, 200)
                            << " stderr: " << e.stderr_data.substr(0, 2000);
  EXPECT_FALSE(e.eof) << "driver gone; stderr: " << e.stderr_data.substr(0, 2000);
  if (!e.outcome.has_value()) return {};
  EXPECT_TRUE(e.outcome->ok()) << e.outcome->status().ToString();
  if (!e.outcome->ok()) return {};
  EXPECT_TRUE((*e.outcome)->has_frame);
  return **e.outcome;
}

json Result(const Execution& e) {
  Runtime::Outcome o = OutcomeOf(e);
  if (o.result_json.empty()) {
    ADD_FAILURE() << "no result; stderr: " << e.stderr_data;
    return json();
  }
  return json::parse(o.result_json);
}

// A session of `language` with its Runtime.
struct Session {
  explicit Session(Language language) : rt(Make(language)), proc(SessionProcess::Start(rt)) {}
  Execution Run(std::string_view code, std::string_view input = "", const Env& env = {}) {
    return proc->Execute(Frame(rt, code, input, env));
  }
  Execution RunWithStdin(std::string_view code, std::string_view stdin_data) {
    return proc->Execute(Frame(rt, code, "", {}, stdin_data));
  }
  Runtime rt;
  std::unique_ptr<SessionProcess> proc;
};

// Sends `code`, which prints "started" (flushed) and then blocks, waits for
// that line, sends SIGINT to the driver's group and waits up to 5 s for the
// frame. `stdout` gets everything the execution printed.
Execution InterruptWhenStarted(Session& s, std::string_view code, milliseconds* took) {
  s.proc->Send(Frame(s.rt, code));
  std::string out, err;
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  while (out.find("started") == std::string::npos && Clock::now() < give_up) {
    Execution partial = s.proc->Await(milliseconds(100));
    out += partial.stdout_data;
    err += partial.stderr_data;
    if (!partial.timed_out) {
      ADD_FAILURE() << "the code ended before the interrupt; stderr: " << err;
      return partial;
    }
  }
  EXPECT_THAT(out, HasSubstr("started")) << err;
  std::this_thread::sleep_for(milliseconds(100));  // well inside the blocking call
  const auto sent = Clock::now();
  s.proc->Interrupt();
  Execution e = s.proc->Await(std::chrono::seconds(5));
  *took = std::chrono::duration_cast<milliseconds>(Clock::now() - sent);
  e.stdout_data = out + e.stdout_data;
  e.stderr_data = err + e.stderr_data;
  return e;
}

// SIGINT while the driver waits for a frame changes nothing, writes nothing.
void ExpectIdleSigintIsHarmless(Session& s) {
  s.proc->Interrupt();
  std::this_thread::sleep_for(milliseconds(100));
  s.proc->Interrupt();
  Execution idle = s.proc->Await(milliseconds(500));
  EXPECT_TRUE(idle.timed_out);
  EXPECT_FALSE(idle.outcome.has_value());
  EXPECT_EQ(idle.stdout_data + idle.stderr_data, "");
  EXPECT_EQ(s.proc->WaitExit(milliseconds(0)), std::nullopt) << "the driver died";
}

// Code that ignores SIGINT and spins: the driver never answers, and stays alive.
void ExpectIgnoredSigintGivesNoFrame(Session& s, std::string_view code) {
  s.proc->Send(Frame(s.rt, code));
  std::string out;
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  while (out.find("started") == std::string::npos && Clock::now() < give_up) {
    Execution partial = s.proc->Await(milliseconds(100));
    out += partial.stdout_data;
    ASSERT_TRUE(partial.timed_out) << partial.stderr_data;
  }
  ASSERT_THAT(out, HasSubstr("started"));
  std::this_thread::sleep_for(milliseconds(100));
  s.proc->Interrupt();
  Execution e = s.proc->Await(milliseconds(1000));
  EXPECT_TRUE(e.timed_out);
  EXPECT_FALSE(e.outcome.has_value());
  EXPECT_EQ(s.proc->WaitExit(milliseconds(0)), std::nullopt) << "the driver died";
}

const std::string kMegabyte(1 << 20, 'x');

// Equality of big outputs, reported by size and first difference, not dumped.
::testing::AssertionResult SameBytes(const std::string& actual, const std::string& expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < actual.size() && i < expected.size() && actual[i] == expected[i]) ++i;
  return ::testing::AssertionFailure()
         << "got " << actual.size() << " bytes, want " << expected.size()
         << "; first difference at " << i << ": "
         << json(actual.substr(i, 40)).dump(-1, ' ', false, json::error_handler_t::replace)
         << " vs "
         << json(expected.substr(i, 40)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---------------------------------------------------------------- codec

TEST(SessionLaunch, DriverArgvAndTheOneShotBaseEnv) {
  Runtime py = Make(Language::kPython);
  Launch l = py.SessionLaunch();
  ASSERT_EQ(l.argv.size(), 4u);
  EXPECT_EQ(l.argv[0], "/usr/bin/python3");
  EXPECT_EQ(l.argv[1], "-I");
  EXPECT_EQ(l.argv[2], "-c");
  EXPECT_THAT(l.argv[3], HasSubstr("_kiln_session()"));
  EXPECT_EQ(l.env, py.OneShotLaunch().env);
  Launch js = Make(Language::kJavaScript).SessionLaunch();
  ASSERT_EQ(js.argv.size(), 4u);
  EXPECT_EQ(js.argv[1], "--experimental-vm-modules");
  EXPECT_EQ(js.argv[2], "-e");
  EXPECT_THAT(js.argv[3], HasSubstr("breakOnSigint"));
  Launch sh = Make(Language::kShell).SessionLaunch();
  EXPECT_EQ(sh.argv.back(), "bash");  // $0
  EXPECT_THAT(sh.argv[sh.argv.size() - 2], HasSubstr("__kiln_next"));
}

TEST(EncodeExecution, IsTheLengthPrefixedJobFrameWithTheSameValidation) {
  for (Language lang : kAll) {
    Runtime rt = Make(lang);
    auto job = rt.EncodeJob("x\n\xc3\xa9", R"({"k": "v\n"})", {{"E", "1"}});
    auto exec = rt.EncodeExecution("x\n\xc3\xa9", R"({"k": "v\n"})", {{"E", "1"}});
    ASSERT_TRUE(job.ok() && exec.ok()) << LanguageName(lang);
    EXPECT_EQ(*exec, std::to_string(job->size()) + "\n" + *job) << LanguageName(lang);
    EXPECT_EQ(rt.EncodeExecution("x", "[1]", {}).status().code(), Code::kInvalidRequest);
    EXPECT_EQ(rt.EncodeExecution("x", "", {{"A=B", "v"}}).status().code(), Code::kInvalidRequest);
  }
  EXPECT_EQ(Make(Language::kShell).EncodeExecution(std::string("a\0b", 3), "", {}).status().code(),
            Code::kInvalidRequest);
  EXPECT_EQ(*Make(Language::kShell).EncodeExecution("", "", {}), "2\n\n.");
}

std::string Wire(std::string_view body) {
  return std::to_string(body.size()) + "\n" + std::string(body);
}

TEST(ControlStream, SplitsFramesFedInAnyPieces) {
  const std::string f1 = R"({"exit_code":0,"result":{"a":[1,"\u00e9"]}})";
  const std::string f2 =
      R"({"exit_code":130,"error":{"type":"KeyboardInterrupt","message":"","traceback":"t"}})";
  const std::string f3 = R"({"exit_code":2})";
  const std::string wire = Wire(f1) + Wire(f2) + Wire(f3);
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    ControlStream stream(Language::kPython);
    std::vector<Runtime::Outcome> got;
    for (size_t i = 0; i < wire.size();) {
      size_t n = round == 0 ? 1 : 1 + rng() % 40;  // round 0: byte by byte
      stream.Feed(std::string_view(wire).substr(i, n));
      i += n;
      while (auto next = stream.Next()) {
        ASSERT_TRUE(next->ok()) << next->status().ToString();
        got.push_back(**next);
      }
    }
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].exit_code, 0);
    EXPECT_EQ(got[0].result_json, "{\"a\":[1,\"\u00e9\"]}");
    EXPECT_EQ(got[1].exit_code, 130);
    ASSERT_TRUE(got[1].error.has_value());
    EXPECT_EQ(got[1].error->type, "KeyboardInterrupt");
    EXPECT_EQ(got[2].exit_code, 2);
    EXPECT_EQ(stream.buffered(), 0u);
    EXPECT_FALSE(stream.broken());
  }
}

TEST(ControlStream, NothingBeforeAFrameIsComplete) {
  ControlStream stream(Language::kShell);
  EXPECT_FALSE(stream.Next().has_value());
  stream.Feed("4\n0\nr");
  EXPECT_FALSE(stream.Next().has_value());
  stream.Feed("h");
  auto one = stream.Next();
  ASSERT_TRUE(one.has_value() && one->ok());
  EXPECT_EQ((*one)->exit_code, 0);
  EXPECT_EQ((*one)->result_json, "\"h\"");
  EXPECT_FALSE(stream.Next().has_value());
}

TEST(ControlStream, MalformedLengthBreaksTheStreamForGood) {
  for (const char* bad : {"x\n", "\n", "01\n", "0\n", "-1\n", "+1\n", " 1\n", "1 \n", "1\r\n",
                          "12345678901234567890\n", "99999999999999999999", "1a\n"}) {
    ControlStream stream(Language::kPython);
    stream.Feed(bad);
    auto next = stream.Next();
    ASSERT_TRUE(next.has_value()) << bad;
    EXPECT_EQ(next->status().code(), Code::kInternal) << bad;
    EXPECT_TRUE(stream.broken()) << bad;
    stream.Feed(Wire(R"({"exit_code":0})"));  // ignored: the framing is lost
    auto again = stream.Next();
    ASSERT_TRUE(again.has_value()) << bad;
    EXPECT_EQ(again->status().code(), Code::kInternal) << bad;
  }
  // 19 digits with no newline yet may still be a length.
  ControlStream pending(Language::kPython);
  pending.Feed("1234567890123456789");
  EXPECT_FALSE(pending.Next().has_value());
  EXPECT_FALSE(pending.broken());
}

TEST(ControlStream, MalformedBodyIsAnErrorForThatFrameOnly) {
  ControlStream stream(Language::kPython);
  stream.Feed(Wire("{not json") + Wire(R"({"exit_code":4})"));
  auto bad = stream.Next();
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->status().code(), Code::kInternal);
  EXPECT_FALSE(stream.broken());
  auto good = stream.Next();
  ASSERT_TRUE(good.has_value() && good->ok());
  EXPECT_EQ((*good)->exit_code, 4);
}

TEST(ControlStream, OversizedFrameIsSkippedWithoutBufferingThenOutputLimit) {
  ControlStream stream(Language::kPython);
  const size_t size = Runtime::kMaxControlBytes + 1;
  stream.Feed(std::to_string(size) + "\n");
  const std::string chunk(1 << 20, ' ');
  size_t sent = 0;
  while (sent + chunk.size() < size) {
    stream.Feed(chunk);
    sent += chunk.size();
    EXPECT_FALSE(stream.Next().has_value());
    EXPECT_LT(stream.buffered(), 64u);  // skipped, not kept
  }
  // The frame's last bytes and the next frame in one piece.
  stream.Feed(std::string(size - sent, ' ') + Wire(R"({"exit_code":0,"result":1})"));
  auto over = stream.Next();
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(over->status().code(), Code::kOutputLimit);
  EXPECT_FALSE(stream.broken());
  auto next = stream.Next();
  ASSERT_TRUE(next.has_value() && next->ok());
  EXPECT_EQ((*next)->result_json, "1");
  // Exactly the limit is fine.
  ControlStream at_limit(Language::kShell);
  std::string body = "0\nr" + std::string(Runtime::kMaxControlBytes - 3, 'y');
  at_limit.Feed(Wire(body));
  auto ok = at_limit.Next();
  ASSERT_TRUE(ok.has_value() && ok->ok()) << ok->status().ToString();
}

TEST(ControlStream, RandomBytesNeverCrash) {
  std::mt19937 rng(42);
  for (int i = 0; i < 2000; ++i) {
    ControlStream stream(i % 2 ? Language::kShell : Language::kJavaScript);
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(i % 3 ? rng() % 16 + '0' - 3 : rng());
    stream.Feed(s);
    for (int k = 0; k < 8 && stream.Next().has_value() && !stream.broken(); ++k) {
    }
  }
}

// ---------------------------------------------------------------- all drivers

TEST(SessionDrivers, EofOnStdinExitsZeroQuietly) {
  for (Language lang : kAll) {
    {  // before any execution
      Session s(lang);
      s.proc->CloseStdin();
      EXPECT_EQ(s.proc->WaitExit(std::chrono::seconds(10)), 0) << LanguageName(lang);
      Execution rest = s.proc->Await(milliseconds(2000));
      EXPECT_TRUE(rest.eof) << LanguageName(lang);
      EXPECT_FALSE(rest.outcome.has_value()) << LanguageName(lang);
      EXPECT_EQ(rest.stdout_data + rest.stderr_data, "") << LanguageName(lang);
    }
    {  // after one
      Session s(lang);
      EXPECT_EQ(OutcomeOf(s.Run(lang == Language::kShell ? "x=1" : "x = 1")).exit_code, 0);
      s.proc->CloseStdin();
      EXPECT_EQ(s.proc->WaitExit(std::chrono::seconds(10)), 0) << LanguageName(lang);
      Execution rest = s.proc->Await(milliseconds(2000));
      EXPECT_TRUE(rest.eof) << LanguageName(lang);
      EXPECT_FALSE(rest.outcome.has_value()) << LanguageName(lang);
      EXPECT_EQ(rest.stdout_data + rest.stderr_data, "") << LanguageName(lang);
    }
  }
}

TEST(SessionDrivers, TruncatedFrameOrBadLengthEndsTheDriverWithoutAFrame) {
  for (Language lang : kAll) {
    for (const char* bad : {"abc\n", "5\nab"}) {
      Session s(lang);
      s.proc->Send(bad);
      s.proc->CloseStdin();
      EXPECT_EQ(s.proc->WaitExit(std::chrono::seconds(10)), 2) << LanguageName(lang) << " " << bad;
      Execution rest = s.proc->Await(milliseconds(2000));
      EXPECT_FALSE(rest.outcome.has_value());
      EXPECT_THAT(rest.stderr_data, HasSubstr("malformed")) << LanguageName(lang) << " " << bad;
    }
  }
}

TEST(SessionDrivers, BackToBackFramesAreAnsweredInOrder) {
  for (Language lang : kAll) {
    Session s(lang);
    std::string frames;
    for (int i = 0; i < 5; ++i) {
      frames += Frame(s.rt, lang == Language::kShell ? "result=" + std::to_string(i)
                                                     : "result = " + std::to_string(i));
    }
    s.proc->Send(frames);  // all at once: the driver must not read past a frame
    for (int i = 0; i < 5; ++i) {
      Execution e = s.proc->Await();
      json want = lang == Language::kShell ? json(std::to_string(i)) : json(i);
      EXPECT_EQ(Result(e), want) << LanguageName(lang) << " " << i;
    }
  }
}

// ---------------------------------------------------------------- Python

TEST(PythonSession, StateSurvivesAcrossExecutions) {
  Session s(Language::kPython);
  Execution e1 = s.Run(
      "import os, json\nx = 41\ndef f(a):\n    return a + x\n"
      "with open('f.txt', 'w') as fh:\n    fh.write('hi')\n"
      "os.mkdir('sub')\nos.chdir('sub')\nos.environ['SET_BY_CODE'] = 'yes'\n"
      "print('one')\nresult = 1",
      R"({"k": 2})", {{"E", "v"}});
  EXPECT_EQ(Result(e1), 1);
  EXPECT_EQ(e1.stdout_data, "one\n");
  Execution e2 = s.Run(
      "x += 1\nresult = [f(1), open('../f.txt').read(), k, os.environ['E'], json.dumps(None),"
      " os.getcwd().endswith('/sub'), os.environ['SET_BY_CODE']]");
  EXPECT_EQ(Result(e2), json::parse(R"([43, "hi", 2, "v", "null", true, "yes"])"));
  EXPECT_EQ(e2.stdout_data, "");
  Execution e3 = s.Run("y = x * 2");  // `result` is per execution
  EXPECT_EQ(OutcomeOf(e3).result_json, "");
  EXPECT_EQ(Result(s.Run("import pickle\nclass P:\n    pass\n"
                         "result = [y, __name__, type(pickle.loads(pickle.dumps(P()))).__name__]")),
            json::parse(R"([84, "__main__", "P"])"));
  std::ifstream file(s.proc->dir() + "/f.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(file), {}), "hi");
}

TEST(PythonSession, ExceptionThenAWorkingExecution) {
  Session s(Language::kPython);
  Execution bad = s.Run("x = 5\ndef g():\n    return 1 / 0\nprint('before')\ng()");
  Runtime::Outcome o = OutcomeOf(bad);
  EXPECT_EQ(o.exit_code, 1);
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->type, "ZeroDivisionError");
  EXPECT_EQ(o.error->message, "division by zero");
  EXPECT_EQ(o.error->traceback,
            "Traceback (most recent call last):\n"
            "  File \"<code-1>\", line 5, in <module>\n"
            "    g()\n"
            "  File \"<code-1>\", line 3, in g\n"
            "    return 1 / 0\n"
            "           ~~^~~\n"
            "ZeroDivisionError: division by zero\n");
  EXPECT_EQ(bad.stdout_data, "before\n");
  EXPECT_EQ(bad.stderr_data, o.error->traceback);
  Execution good = s.Run("result = x");
  EXPECT_EQ(Result(good), 5);
  EXPECT_FALSE(OutcomeOf(good).error.has_value());
  // A function from an earlier execution is shown with that execution's source.
  Execution later = s.Run("\n\ng()");
  ASSERT_TRUE(OutcomeOf(later).error.has_value());
  EXPECT_THAT(OutcomeOf(later).error->traceback,
              HasSubstr("  File \"<code-3>\", line 3, in <module>\n    g()\n"
                        "  File \"<code-1>\", line 3, in g\n    return 1 / 0\n"));
}

TEST(PythonSession, SystemExitAndExitEndTheExecutionNotTheSession) {
  Session s(Language::kPython);
  Execution e = s.Run("import sys\nresult = 'partial'\nsys.exit(3)\nresult = 'no'");
  EXPECT_EQ(OutcomeOf(e).exit_code, 3);
  EXPECT_EQ(Result(e), "partial");
  EXPECT_FALSE(OutcomeOf(e).error.has_value());
  Execution msg = s.Run("import sys\nsys.exit('bye')");
  EXPECT_EQ(OutcomeOf(msg).exit_code, 1);
  EXPECT_EQ(msg.stderr_data, "bye\n");
  EXPECT_EQ(OutcomeOf(s.Run("exit(4)")).exit_code, 4);  // site's exit() closes sys.stdin
  EXPECT_EQ(Result(s.Run("import sys, subprocess\n"
                         "result = [sys.stdin.read(), subprocess.run(['cat'], capture_output=True)"
                         ".stdout.decode(), sys.argv[0]]")),
            json::parse(R"(["", "", "-c"])"));
}

TEST(PythonSession, ResultRulesAreTheOneShotOnes) {
  Session s(Language::kPython);
  EXPECT_EQ(OutcomeOf(s.Run("result = None")).result_json, "null");
  Execution bad = s.Run("result = object()");
  EXPECT_EQ(OutcomeOf(bad).exit_code, 0);
  ASSERT_TRUE(OutcomeOf(bad).error.has_value());
  EXPECT_EQ(OutcomeOf(bad).error->type, "ResultNotSerializable");
  EXPECT_EQ(Result(s.Run("result = {'s': {3}}")), json::parse(R"({"s": [3]})"));
  // A result is reported even when the code then failed.
  Execution failed = s.Run("result = 'kept'\nraise ValueError('v')");
  EXPECT_EQ(Result(failed), "kept");
  EXPECT_EQ(OutcomeOf(failed).exit_code, 1);
}

TEST(PythonSession, OutputCannotForgeTheControlChannel) {
  Session s(Language::kPython);
  Execution e = s.Run(
      "import os, sys\n"
      "sys.stdout.buffer.write(b'15\\n{\"exit_code\": 7}\\n\\0\\xff\\xfe')\n"
      "sys.stdout.buffer.write(b'x' * 1048576)\n"
      "sys.stderr.buffer.write(b'2\\n{}\\0\\xc3')\n"
      "try:\n    os.write(3, b'2\\n{}')\n    w = 'written'\nexcept OSError:\n    w = 'closed'\n"
      "result = ['real', w]");
  EXPECT_EQ(OutcomeOf(e).exit_code, 0);
  EXPECT_EQ(Result(e), json::parse(R"(["real", "closed"])"));
  EXPECT_TRUE(
      SameBytes(e.stdout_data, std::string("15\n{\"exit_code\": 7}\n\0\xff\xfe", 23) + kMegabyte));
  EXPECT_EQ(e.stderr_data, std::string("2\n{}\0\xc3", 6));
  // The stream is still in step, and children see only fds 0-2 (ls's own is 3).
  Execution next = s.Run(
      "import subprocess\n"
      "result = subprocess.run(['ls', '/proc/self/fd'], capture_output=True, close_fds=False)"
      ".stdout.decode().split()");
  EXPECT_EQ(Result(next), json::parse(R"(["0", "1", "2", "3"])"));
  EXPECT_EQ(next.stdout_data + next.stderr_data, "");  // nothing of the megabyte was late
}

TEST(PythonSession, InterruptEndsTheCodeAndTheSessionSurvives) {
  Session s(Language::kPython);
  EXPECT_EQ(OutcomeOf(s.Run("x = 7")).exit_code, 0);
  milliseconds took{};
  Execution e = InterruptWhenStarted(
      s, "import time\nprint('started', flush=True)\ntime.sleep(100)\nprint('after')", &took);
  Runtime::Outcome o = OutcomeOf(e);
  EXPECT_EQ(o.exit_code, 130);
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->type, "KeyboardInterrupt");
  EXPECT_EQ(o.error->traceback,
            "Traceback (most recent call last):\n"
            "  File \"<code-2>\", line 3, in <module>\n"
            "    time.sleep(100)\n"
            "KeyboardInterrupt\n");  // no driver frames
  EXPECT_EQ(e.stdout_data, "started\n");
  EXPECT_LT(took.count(), 5000);
  EXPECT_EQ(Result(s.Run("result = x")), 7);
  // A child in the foreground gets the SIGINT too.
  Execution child = InterruptWhenStarted(
      s, "import subprocess\nprint('started', flush=True)\nsubprocess.run(['sleep', '100'])",
      &took);
  EXPECT_EQ(OutcomeOf(child).exit_code, 130);
  EXPECT_LT(took.count(), 5000);
  EXPECT_EQ(Result(s.Run("result = x + 1")), 8);
}

// A statement that replaces the SIGINT handler (and ends) does not keep the
// next one from being interrupted: the driver puts its own back.
TEST(PythonSession, ReplacedSigintHandlerIsRestoredForTheNextExecution) {
  Session s(Language::kPython);
  for (const char* replace : {"import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)",
                              "import signal\nsignal.signal(signal.SIGINT, lambda *a: None)"}) {
    EXPECT_EQ(OutcomeOf(s.Run(replace)).exit_code, 0);
    milliseconds took{};
    Execution e = InterruptWhenStarted(
        s, "import time\nprint('started', flush=True)\ntime.sleep(100)", &took);
    EXPECT_EQ(OutcomeOf(e).exit_code, 130) << replace;
    EXPECT_LT(took.count(), 5000);
  }
  EXPECT_EQ(OutcomeOf(s.Run("x = 1")).exit_code, 0);
}

TEST(PythonSession, SigintWhileIdleIsHarmless) {
  Session s(Language::kPython);
  EXPECT_EQ(OutcomeOf(s.Run("x = 3")).exit_code, 0);
  ExpectIdleSigintIsHarmless(s);
  Execution after = s.Run("import time\ntime.sleep(0.2)\nresult = x");  // not interrupted late
  EXPECT_EQ(Result(after), 3);
  EXPECT_FALSE(OutcomeOf(after).error.has_value());
}

TEST(PythonSession, CodeIgnoringSigintGetsNoFrame) {
  Session s(Language::kPython);
  ExpectIgnoredSigintGivesNoFrame(s,
                                  "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                  "print('started', flush=True)\nwhile True:\n    pass");
}

// ---------------------------------------------------------------- JavaScript

TEST(JavaScriptSession, StateSurvivesAcrossExecutions) {
  Session s(Language::kJavaScript);
  Execution e1 = s.Run(
      "const fs = require('fs');\nlet x = 41;\nfunction f(a) { return a + x; }\n"
      "fs.writeFileSync('f.txt', 'hi');\nfs.mkdirSync('sub');\nprocess.chdir('sub');\n"
      "process.env.SET_BY_CODE = 'yes';\nconsole.log('one');\nresult = 1;",
      R"({"k": 2})", {{"E", "v"}});
  EXPECT_EQ(Result(e1), 1);
  EXPECT_EQ(e1.stdout_data, "one\n");
  Execution e2 = s.Run(
      "x += 1;\nresult = [f(1), fs.readFileSync('../f.txt', 'utf8'), k, process.env.E,\n"
      "          process.cwd().endsWith('/sub'), process.env.SET_BY_CODE];");
  EXPECT_EQ(Result(e2), json::parse(R"([43, "hi", 2, "v", true, "yes"])"));
  EXPECT_EQ(OutcomeOf(s.Run("const y = x * 2;")).result_json, "");  // `result` is per execution
  EXPECT_EQ(Result(s.Run("result = [y, typeof k, typeof require];")),
            json::parse(R"([84, "number", "function"])"));
  // A top-level `let result` persists like any binding; it is cleared before each execution.
  EXPECT_EQ(Result(s.Run("let result = 'lexical';")), "lexical");
  EXPECT_EQ(OutcomeOf(s.Run("1;")).result_json, "");
  EXPECT_EQ(Result(s.Run("result = 'again';")), "again");
}

TEST(JavaScriptSession, ErrorsThenAWorkingExecution) {
  Session s(Language::kJavaScript);
  Execution bad = s.Run(
      "globalThis.x = 5;\nfunction g(o) {\n  return o.x;\n}\n"
      "console.log('before');\ng(null);");
  Runtime::Outcome o = OutcomeOf(bad);
  EXPECT_EQ(o.exit_code, 1);
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->type, "TypeError");
  EXPECT_EQ(o.error->message, "Cannot read properties of null (reading 'x')");
  EXPECT_THAT(o.error->traceback, HasSubstr("    at g (<code-1>:3:12)\n    at <code-1>:6:1"));
  EXPECT_THAT(o.error->traceback, Not(HasSubstr("[eval]")));
  EXPECT_THAT(o.error->traceback, Not(HasSubstr("node:")));
  EXPECT_EQ(bad.stdout_data, "before\n");
  EXPECT_EQ(bad.stderr_data, o.error->traceback + "\n");
  EXPECT_EQ(Result(s.Run("result = x;")), 5);
  // Redeclaring a top-level let/const is a SyntaxError, as across <script> tags.
  EXPECT_EQ(OutcomeOf(s.Run("let z = 1;")).exit_code, 0);
  Execution again = s.Run("let z = 2;");
  ASSERT_TRUE(OutcomeOf(again).error.has_value());
  EXPECT_EQ(OutcomeOf(again).error->type, "SyntaxError");
  EXPECT_EQ(OutcomeOf(again).error->message, "Identifier 'z' has already been declared");
  Execution thrown = s.Run("throw 'boom';");
  ASSERT_TRUE(OutcomeOf(thrown).error.has_value());
  EXPECT_EQ(OutcomeOf(thrown).error->type, "ThrownValue");
  EXPECT_EQ(Result(s.Run("result = [z, x];")), json::parse("[1, 5]"));
}

TEST(JavaScriptSession, ProcessExitEndsTheExecutionNotTheSession) {
  Session s(Language::kJavaScript);
  Execution e = s.Run("result = 'partial';\nprocess.exit(3);\nresult = 'no';");
  EXPECT_EQ(OutcomeOf(e).exit_code, 3);
  EXPECT_EQ(Result(e), "partial");
  EXPECT_FALSE(OutcomeOf(e).error.has_value());
  EXPECT_EQ(OutcomeOf(s.Run("process.exitCode = 5;")).exit_code, 5);
  EXPECT_EQ(OutcomeOf(s.Run("1;")).exit_code, 0);  // exitCode is per execution
}

TEST(JavaScriptSession, PromisesAndTopLevelAwait) {
  Session s(Language::kJavaScript);
  EXPECT_EQ(Result(s.Run("result = new Promise((r) => setTimeout(() => r({v: 2}), 20));")),
            json::parse(R"({"v": 2})"));
  Execution tla = s.Run(
      "const v = await new Promise((r) => setTimeout(() => r(20), 20));\n"
      "globalThis.w = v;\nresult = v + 1;");
  EXPECT_EQ(Result(tla), 21) << tla.stderr_data;
  EXPECT_EQ(Result(s.Run("result = w;")), 20);
  Execution rejected = s.Run("Promise.reject(new RangeError('late'));\nresult = 7;");
  EXPECT_EQ(OutcomeOf(rejected).exit_code, 1);
  ASSERT_TRUE(OutcomeOf(rejected).error.has_value());
  EXPECT_EQ(OutcomeOf(rejected).error->type, "RangeError");
  EXPECT_EQ(Result(rejected), 7);
  Execution bad = s.Run("result = () => 1;");
  ASSERT_TRUE(OutcomeOf(bad).error.has_value());
  EXPECT_EQ(OutcomeOf(bad).error->type, "ResultNotSerializable");
  EXPECT_EQ(OutcomeOf(bad).exit_code, 0);
}

TEST(JavaScriptSession, OutputCannotForgeTheControlChannel) {
  Session s(Language::kJavaScript);
  Execution e = s.Run(
      "process.stdout.write(Buffer.from('15\\n{\"exit_code\":7}\\n\\0\\xff', 'latin1'));\n"
      "process.stdout.write('x'.repeat(1048576));\n"
      "process.stderr.write('2\\n{}\\0');\n"
      "let w;\ntry { require('fs').writeSync(3, '2\\n{}'); w = 'written'; }"
      " catch (e) { w = 'closed'; }\n"
      "result = ['real', w];");
  EXPECT_EQ(OutcomeOf(e).exit_code, 0);
  EXPECT_EQ(Result(e), json::parse(R"(["real", "closed"])"));
  EXPECT_TRUE(
      SameBytes(e.stdout_data, std::string("15\n{\"exit_code\":7}\n\0\xff", 21) + kMegabyte));
  EXPECT_EQ(e.stderr_data, std::string("2\n{}\0", 5));
  Execution next = s.Run(
      "const cp = require('child_process');\n"
      "result = [cp.execSync('ls /proc/self/fd', {stdio: ['inherit', 'pipe', 'pipe']})"
      ".toString().split('\\n').filter(Boolean), require('fs').readFileSync(0).length];");
  EXPECT_EQ(Result(next), json::parse(R"([["0", "1", "2", "3"], 0])"));
  EXPECT_EQ(next.stdout_data + next.stderr_data, "");  // nothing of the megabyte was late
}

TEST(JavaScriptSession, InterruptEndsTheCodeAndTheSessionSurvives) {
  Session s(Language::kJavaScript);
  EXPECT_EQ(OutcomeOf(s.Run("let x = 7;")).exit_code, 0);
  milliseconds took{};
  Execution e = InterruptWhenStarted(
      s, "console.log('started');\nwhile (true) {}\nconsole.log('after');", &took);
  Runtime::Outcome o = OutcomeOf(e);
  EXPECT_EQ(o.exit_code, 130);
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->type, "Interrupted");
  EXPECT_EQ(e.stdout_data, "started\n");
  EXPECT_LT(took.count(), 5000);
  EXPECT_EQ(Result(s.Run("result = x;")), 7);
  // Waiting for a promise `result` is interrupted too.
  Execution waiting =
      InterruptWhenStarted(s, "console.log('started');\nresult = new Promise(() => {});", &took);
  EXPECT_EQ(OutcomeOf(waiting).exit_code, 130);
  ASSERT_TRUE(OutcomeOf(waiting).error.has_value());
  EXPECT_EQ(OutcomeOf(waiting).error->type, "Interrupted");
  EXPECT_EQ(Result(s.Run("result = x + 1;")), 8);
}

TEST(JavaScriptSession, SigintWhileIdleIsHarmless) {
  Session s(Language::kJavaScript);
  EXPECT_EQ(OutcomeOf(s.Run("let x = 3;")).exit_code, 0);
  ExpectIdleSigintIsHarmless(s);
  EXPECT_EQ(Result(s.Run("result = x;")), 3);
}

TEST(JavaScriptSession, CodeIgnoringSigintGetsNoFrame) {
  Session s(Language::kJavaScript);
  // A listener of its own takes SIGINT away from breakOnSigint.
  ExpectIgnoredSigintGivesNoFrame(
      s, "process.on('SIGINT', () => {});\nconsole.log('started');\nwhile (true) {}");
}

// ---------------------------------------------------------------- shell

TEST(ShellSession, StateCdAndExportSurviveAcrossExecutions) {
  Session s(Language::kShell);
  Execution e1 = s.Run(
      "x=41\nf() { echo $(( $1 + x )); }\necho hi > f.txt\nmkdir sub && cd sub\n"
      "export EXP=e1\necho one\nresult=1",
      R"({"k": 2})", {{"E", "v"}});
  EXPECT_EQ(Result(e1), "1");
  EXPECT_EQ(e1.stdout_data, "one\n");
  Execution e2 = s.Run(
      "x=$((x + 1))\n"
      "result=\"$(f 1)|$(cat ../f.txt)|$k|$E|${PWD##*/}|$(sh -c 'echo $EXP')|$#\"");
  EXPECT_EQ(Result(e2), "43|hi|2|v|sub|e1|0");
  EXPECT_EQ(OutcomeOf(s.Run("y=$((x * 2))")).result_json, "");  // `result` is per execution
  EXPECT_EQ(Result(s.Run("result=\"$y $(pwd | sed 's|.*/||')\"")), "84 sub");
}

TEST(ShellSession, FailingCommandsThenAWorkingExecution) {
  Session s(Language::kShell);
  Execution f = s.Run("x=5\necho before\nfalse");
  EXPECT_EQ(OutcomeOf(f).exit_code, 1);
  EXPECT_EQ(f.stdout_data, "before\n");
  Execution ls = s.Run("ls /nonexistent");
  EXPECT_EQ(OutcomeOf(ls).exit_code, 2);
  EXPECT_THAT(ls.stderr_data, HasSubstr("/nonexistent"));
  Execution syntax = s.Run("if then");
  EXPECT_EQ(OutcomeOf(syntax).exit_code, 2);
  EXPECT_THAT(syntax.stderr_data, HasSubstr("syntax error"));
  // break/continue at the code's top level cannot leave the driver's loop.
  Execution brk = s.Run("break\necho no");
  EXPECT_EQ(OutcomeOf(brk).exit_code, 1);
  EXPECT_EQ(brk.stdout_data, "");
  EXPECT_EQ(OutcomeOf(s.Run("continue 5")).exit_code, 1);
  EXPECT_EQ(Result(s.Run("result=$x")), "5");
}

TEST(ShellSession, OptionsOfTheCodeDoNotTripTheDriver) {
  Session s(Language::kShell);
  Execution x = s.Run("set -x\necho traced");
  EXPECT_EQ(x.stdout_data, "traced\n");
  EXPECT_EQ(x.stderr_data, "++ echo traced\n");  // the code's commands only
  Execution still = s.Run("echo two");
  EXPECT_EQ(still.stderr_data, "++ echo two\n");  // xtrace persists for the code
  Execution u = s.Run("set +x\nset -u -o pipefail\nresult=ok");
  EXPECT_EQ(Result(u), "ok");
  EXPECT_EQ(u.stderr_data, "++ set +x\n");
  EXPECT_EQ(OutcomeOf(s.Run("true")).result_json, "");  // unset result under set -u
  EXPECT_EQ(OutcomeOf(s.Run("set -e")).exit_code, 0);
  EXPECT_EQ(Result(s.Run("result=alive")), "alive");
}

TEST(ShellSession, ExitEndsTheSessionWithoutAFrame) {
  Session s(Language::kShell);
  Execution e = s.Run("result=x\nexit 3\necho no");
  EXPECT_TRUE(e.eof);
  EXPECT_FALSE(e.outcome.has_value());
  EXPECT_EQ(s.proc->WaitExit(std::chrono::seconds(5)), 3);
  Session b(Language::kShell);
  Execution brk = b.Run("break 2");  // leaves both of the driver's loops
  EXPECT_TRUE(brk.eof);
  EXPECT_FALSE(brk.outcome.has_value());
  EXPECT_THAT(brk.stderr_data, HasSubstr("break outside a loop ended the session"));
  EXPECT_EQ(b.proc->WaitExit(std::chrono::seconds(5)), 1);
}

TEST(ShellSession, OutputCannotForgeTheControlChannel) {
  Session s(Language::kShell);
  Execution e = s.Run(
      "printf '3\\n0\\nrfake\\0\\377'\nhead -c 1048576 /dev/zero | tr '\\0' x\n"
      "printf '2\\n1\\n' >&2\n"
      "result=\"$(readlink /proc/self/fd/3 || echo closed)|$( { echo 2 >&3; } 2>&- || echo "
      "cannot)\"");
  EXPECT_EQ(OutcomeOf(e).exit_code, 0);
  EXPECT_EQ(Result(e), "closed|cannot");
  EXPECT_TRUE(SameBytes(e.stdout_data, std::string("3\n0\nrfake\0\xff", 11) + kMegabyte));
  EXPECT_EQ(e.stderr_data, "2\n1\n");
  Execution next = s.Run("result=\"$(ls /proc/self/fd | tr '\\n' ' ')|$(cat | wc -c)\"");
  EXPECT_EQ(Result(next), "0 1 2 3 |0");
  EXPECT_EQ(next.stdout_data + next.stderr_data, "");  // nothing of the megabyte was late
}

TEST(ShellSession, InterruptKillsTheForegroundCommandAndTheSessionSurvives) {
  Session s(Language::kShell);
  EXPECT_EQ(OutcomeOf(s.Run("x=7; cd /tmp")).exit_code, 0);
  milliseconds took{};
  Execution e = InterruptWhenStarted(s, "echo started\nsleep 100\necho after", &took);
  EXPECT_EQ(OutcomeOf(e).exit_code, 130);
  EXPECT_EQ(e.stdout_data, "started\n");  // the rest of the code is abandoned
  EXPECT_LT(took.count(), 5000);
  EXPECT_EQ(Result(s.Run("result=\"$x $PWD\"")), "7 /tmp");
  Execution loop = InterruptWhenStarted(
      s, "echo started\nfor i in 1 2; do while :; do :; done; done\necho after", &took);
  EXPECT_EQ(OutcomeOf(loop).exit_code, 130);
  EXPECT_EQ(loop.stdout_data, "started\n");
  EXPECT_LT(took.count(), 5000);
  EXPECT_EQ(Result(s.Run("result=$((x + 1))")), "8");
}

TEST(ShellSession, SigintWhileIdleIsHarmless) {
  Session s(Language::kShell);
  EXPECT_EQ(OutcomeOf(s.Run("x=3")).exit_code, 0);
  ExpectIdleSigintIsHarmless(s);
  Execution after = s.Run("sleep 0.2; result=$x");
  EXPECT_EQ(Result(after), "3");
  EXPECT_EQ(OutcomeOf(after).exit_code, 0);
}

TEST(ShellSession, CodeIgnoringSigintGetsNoFrame) {
  Session s(Language::kShell);
  ExpectIgnoredSigintGivesNoFrame(s, "trap '' INT\necho started\nwhile :; do :; done");
}

// ---------------------------------------------------------------- stdin

// Each execution's stdin is on the code's fd 0 (children included), and the
// next execution without one finds fd 0 empty again; the frames still flow.
TEST(SessionStdin, EachExecutionReadsItsOwnStdinOnFdZero) {
  const std::map<Language, std::pair<std::string, std::string>> code = {
      {Language::kPython,
       {"import os, subprocess, sys\nresult = [os.read(0, 4).decode(), "
        "subprocess.run(['cat'], capture_output=True, text=True).stdout]",
        "import sys, os\nresult = [sys.stdin.read(), os.read(0, 10).decode()]"}},
      {Language::kJavaScript,
       {"result = [require('child_process').execSync('head -n 1', {stdio: ['inherit', 'pipe', "
        "'pipe']}).toString(), require('fs').readFileSync(0).toString()]",
        "result = [require('fs').readFileSync(0).toString(), '']"}},
      {Language::kShell, {"read -r a; b=$(cat); result=\"$a|$b\"", "b=$(cat); result=\"|$b\""}},
  };
  for (Language l : kAll) {
    SCOPED_TRACE(std::string(LanguageName(l)));
    Session s(l);
    const auto& [with, without] = code.at(l);
    Execution first = s.RunWithStdin(with, "one\ntwo\n");
    Execution second = s.Run(without);
    Execution third = s.RunWithStdin(with, "six\nfour\n");
    if (l == Language::kShell) {
      EXPECT_EQ(Result(first), "one|two");
      EXPECT_EQ(Result(second), "|");
      EXPECT_EQ(Result(third), "six|four");
    } else if (l == Language::kPython) {
      EXPECT_EQ(Result(first), json::array({"one\n", "two\n"}));
      EXPECT_EQ(Result(second), json::array({"", ""}));
      EXPECT_EQ(Result(third), json::array({"six\n", "four\n"}));
    } else {
      // `head -n 1` may read more than its line: only the child's part is exact.
      EXPECT_EQ(Result(first)[0], "one\n");
      EXPECT_EQ(Result(second), json::array({"", ""}));
      EXPECT_EQ(Result(third)[0], "six\n");
    }
  }
}

// ---------------------------------------------------------------- echo

std::vector<common::protocol::RichOutput> Outputs(const Execution& e) {
  return OutcomeOf(e).outputs;
}

TEST(PythonSessionEcho, AFinalExpressionIsTheResultAndATextOutput) {
  using common::protocol::RichOutput;
  Session s(Language::kPython);
  Execution a = s.Run("x = 5\nx");
  EXPECT_EQ(Result(a), 5);
  EXPECT_EQ(Outputs(a), (std::vector<RichOutput>{{"text/plain", "5"}}));
  Execution b = s.Run("x");
  EXPECT_EQ(Result(b), 5);
  // An explicit `result` wins; the value is still shown.
  Execution c = s.Run("result = 1\nx + 1");
  EXPECT_EQ(Result(c), 1);
  EXPECT_EQ(Outputs(c), (std::vector<RichOutput>{{"text/plain", "6"}}));
  // None, a statement, or a call returning None: nothing echoed.
  for (const char* quiet : {"None", "y = 2", "print('p')", "def f():\n    return 3\n"}) {
    Execution q = s.Run(quiet);
    EXPECT_TRUE(OutcomeOf(q).result_json.empty()) << quiet;
    EXPECT_TRUE(Outputs(q).empty()) << quiet;
  }
  // Not JSON-serialisable: an output, no result and no error.
  Execution d = s.Run(
      "class P:\n    def __repr__(self):\n        return 'P!'\n"
      "    def _repr_html_(self):\n        return '<b>P</b>'\nP()");
  Runtime::Outcome od = OutcomeOf(d);
  EXPECT_TRUE(od.result_json.empty());
  EXPECT_FALSE(od.error.has_value());
  EXPECT_EQ(od.exit_code, 0);
  EXPECT_EQ(od.outputs, (std::vector<RichOutput>{{"text/plain", "P!"}, {"text/html", "<b>P</b>"}}));
  // An error in the expression is an ordinary error; the session goes on.
  Execution e = s.Run("1/0");
  EXPECT_EQ(OutcomeOf(e).error->type, "ZeroDivisionError");
  EXPECT_EQ(Result(s.Run("x")), 5);
}

}  // namespace
}  // namespace kiln::worker::runtimes
