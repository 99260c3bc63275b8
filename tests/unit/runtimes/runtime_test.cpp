// Runtime: the job frame and control frame codecs, and the real wrappers run
// by the real interpreters (no sandbox) through RunWrapper.
#include "worker/runtimes/runtime.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "tests/unit/runtimes/run_wrapper.hpp"

namespace kiln::worker::runtimes {
namespace {

using common::Code;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunOutput;
using testing::RunWrapper;
using ::testing::StartsWith;

using Env = std::map<std::string, std::string>;

Runtime Make(Language language) {
  auto rt = Runtime::Create(language, RuntimePaths{});
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return std::move(rt).value();
}

// One job through the real wrapper.
struct Job {
  RunOutput run;
  Runtime::Outcome outcome;
};

Job RunJob(Language language, std::string_view code, std::string_view input = "",
           const Env& env = {}, std::string_view stdin_data = {}) {
  Runtime rt = Make(language);
  auto frame = rt.EncodeJob(code, input, env, stdin_data);
  EXPECT_TRUE(frame.ok()) << frame.status().ToString();
  Job job;
  job.run = RunWrapper(rt, frame.ok() ? *frame : "");
  EXPECT_FALSE(job.run.timed_out) << "stderr: " << job.run.stderr_data;
  auto outcome = rt.ParseControl(job.run.control);
  EXPECT_TRUE(outcome.ok()) << outcome.status().ToString() << " control: " << job.run.control;
  if (outcome.ok()) job.outcome = *outcome;
  return job;
}

json Result(const Job& job) { return json::parse(job.outcome.result_json); }

const char* kRichInput = R"({"n": 42, "f": -1.5, "big": 12345678901234,
  "s": "quote\" 'single' back\\slash\nnewline \u00fcn\u00efc\u00f8d\u00e9 \ud83d\ude00 $HOME `x`",
  "nested": {"a": [1, {"b": null}], "t": true, "e": {}}, "empty": ""})";

// ---------------------------------------------------------------- language, Create

TEST(ParseLanguage, AcceptsTheApiNamesOnly) {
  EXPECT_EQ(*ParseLanguage("python"), Language::kPython);
  EXPECT_EQ(*ParseLanguage("javascript"), Language::kJavaScript);
  EXPECT_EQ(*ParseLanguage("shell"), Language::kShell);
  for (const char* bad : {"js", "node", "Python", "bash", ""}) {
    EXPECT_EQ(ParseLanguage(bad).status().code(), Code::kInvalidRequest) << bad;
  }
  EXPECT_EQ(LanguageName(Language::kJavaScript), "javascript");
}

TEST(RuntimeCreate, MissingOrNonExecutableInterpreterIsUnavailable) {
  for (const char* path : {"/nonexistent/python3", "/usr/bin", "/etc/passwd", "python3", ""}) {
    RuntimePaths paths;
    paths.python = path;
    EXPECT_EQ(Runtime::Create(Language::kPython, paths).status().code(), Code::kRuntimeUnavailable)
        << path;
  }
  auto rt = Runtime::Create(Language::kShell, RuntimePaths{});
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ(rt->interpreter(), "/bin/bash");
}

TEST(RuntimeLaunch, ArgvCarriesTheWrapperAndTheBaseEnvIsFixed) {
  Launch py = Make(Language::kPython).OneShotLaunch();
  ASSERT_EQ(py.argv.size(), 4u);
  EXPECT_EQ(py.argv[0], "/usr/bin/python3");
  EXPECT_EQ(py.argv[1], "-I");
  EXPECT_THAT(py.argv[3], HasSubstr("_kiln_main()"));
  EXPECT_THAT(py.env, ::testing::UnorderedElementsAre(
                          "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "TMPDIR=/tmp",
                          "LANG=C.UTF-8", "MPLBACKEND=Agg", "MPLCONFIGDIR=/tmp/matplotlib",
                          "XDG_CACHE_HOME=/tmp/.cache"));
  EXPECT_EQ(Make(Language::kPython).SessionLaunch().env, py.env);
  EXPECT_THAT(Make(Language::kShell).OneShotLaunch().env,
              ::testing::UnorderedElementsAre("PATH=/usr/local/bin:/usr/bin:/bin",
                                              "HOME=/workspace", "TMPDIR=/tmp", "LANG=C.UTF-8"));
  Launch sh = Make(Language::kShell).OneShotLaunch();
  EXPECT_EQ(sh.argv.back(), "bash");  // $0
  // import() in a vm.Script needs this flag on Node 20.
  EXPECT_THAT(
      Make(Language::kJavaScript).OneShotLaunch().argv,
      ::testing::ElementsAre("/usr/bin/node", "--experimental-vm-modules", "-e", ::testing::_));
  // The zygote gets the preloaded modules before its library's path.
  auto rt = Runtime::Create(Language::kPython, RuntimePaths{}, {"json", "email.utils"});
  ASSERT_TRUE(rt.ok());
  Launch z = rt->OneShotLaunch();
  ASSERT_EQ(z.zygote_argv.size(), 6u);
  EXPECT_EQ(z.zygote_argv[5], "json,email.utils");
  EXPECT_EQ(Runtime::Create(Language::kPython, RuntimePaths{}, {"os; import x"}).status().code(),
            Code::kInvalidRequest);
  EXPECT_TRUE(IsValidModulePath("matplotlib.pyplot"));
  for (const char* bad : {"", ".a", "a.", "a..b", "1a", "a-b", "a b"}) {
    EXPECT_FALSE(IsValidModulePath(bad)) << bad;
  }
}

// ---------------------------------------------------------------- EncodeJob

TEST(EncodeJob, RejectsBadInputAndEnv) {
  for (Language lang : {Language::kPython, Language::kJavaScript, Language::kShell}) {
    Runtime rt = Make(lang);
    for (const char* input : {"[1]", "1", "\"s\"", "null", "{", "{\"a-b\": 1}", "{\"1x\": 1}",
                              "{\"\": 1}", "{\"a b\": 1}", "{\"\u00e9\": 1}"}) {
      auto s = rt.EncodeJob("x", input, {});
      EXPECT_EQ(s.status().code(), Code::kInvalidRequest) << LanguageName(lang) << " " << input;
    }
    EXPECT_EQ(rt.EncodeJob("x", "", {{"A=B", "v"}}).status().code(), Code::kInvalidRequest);
    EXPECT_EQ(rt.EncodeJob("x", "", {{"", "v"}}).status().code(), Code::kInvalidRequest);
    EXPECT_EQ(rt.EncodeJob("x", "", {{"A", std::string("a\0b", 3)}}).status().code(),
              Code::kInvalidRequest);
    EXPECT_EQ(rt.EncodeJob("x", "", {{"A", "\xff"}}).status().code(), Code::kInvalidRequest);
    EXPECT_TRUE(rt.EncodeJob("x", "", {{"_A1", "v"}}).ok());
    EXPECT_TRUE(rt.EncodeJob("x", "{}", {}).ok());
  }
  Runtime sh = Make(Language::kShell);
  auto nul = sh.EncodeJob(std::string("echo a\0b", 8), "", {});
  EXPECT_EQ(nul.status().code(), Code::kInvalidRequest);
  EXPECT_THAT(nul.status().message(), HasSubstr("NUL"));
  EXPECT_EQ(sh.EncodeJob("x", R"({"a": "x\u0000y"})", {}).status().code(), Code::kInvalidRequest);
  EXPECT_EQ(sh.EncodeJob("x", R"({"A": 1})", {{"A", "2"}}).status().code(), Code::kInvalidRequest);
  EXPECT_EQ(sh.EncodeJob("x", R"({"UID": 1})", {}).status().code(), Code::kInvalidRequest);
  EXPECT_EQ(sh.EncodeJob("x", "", {{"SHELLOPTS", "x"}}).status().code(), Code::kInvalidRequest);
}

TEST(EncodeJob, ShellHeaderEscapesEveryByte) {
  auto frame = Make(Language::kShell).EncodeJob("echo hi", R"({"k": "a'$"})", {{"E", "\n"}});
  ASSERT_TRUE(frame.ok());
  EXPECT_EQ(*frame, "export E=$'\\x0a' k=$'\\x61\\x27\\x24'\necho hi.");
}

// ---------------------------------------------------------------- ParseControl

TEST(ParseControl, EmptyMeansNoFrame) {
  for (Language lang : {Language::kPython, Language::kShell}) {
    auto out = Make(lang).ParseControl("");
    ASSERT_TRUE(out.ok());
    EXPECT_FALSE(out->has_frame);
    EXPECT_FALSE(out->exit_code.has_value());
    EXPECT_EQ(out->result_json, "");
  }
}

TEST(ParseControl, DecodesJsonFrames) {
  Runtime rt = Make(Language::kPython);
  auto out = rt.ParseControl(
      R"({"exit_code": 1, "result": {"a": [1, "\u00e9"]},
          "error": {"type": "E", "message": "m", "traceback": "t"}})");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, 1);
  EXPECT_EQ(out->result_json, "{\"a\":[1,\"\u00e9\"]}");
  EXPECT_EQ(out->error, (common::protocol::ErrorInfo{"E", "m", "t"}));
  auto null_result = rt.ParseControl(R"({"exit_code": 0, "result": null})");
  ASSERT_TRUE(null_result.ok());
  EXPECT_EQ(null_result->result_json, "null");  // set to None/null, not unset
}

TEST(ParseControl, GarbageIsAnErrorNeverACrash) {
  Runtime py = Make(Language::kPython), sh = Make(Language::kShell);
  for (const char* bad :
       {"{", "[]", "null", "garbage", "{\"exit_code\": \"0\"}", "{\"exit_code\": 300}",
        "{\"exit_code\": -1}", "{\"exit_code\": 1.5}", "{}", "{\"exit_code\":0}{\"exit_code\":0}",
        "{\"exit_code\": 0, \"error\": {\"type\": \"E\"}}", "{\"exit_code\": 0, \"error\": 5}",
        "{\"exit_code\": 0, \"x\": 1}", "{\"exit_code\": 0, \"result\": \"\\ud800\"}"}) {
    EXPECT_EQ(py.ParseControl(bad).status().code(), Code::kInternal) << bad;
  }
  for (const char* bad : {"garbage", "\n", "x\n", "256\n", "-1\n", "0", "0\nx", "1 \n"}) {
    EXPECT_EQ(sh.ParseControl(bad).status().code(), Code::kInternal) << bad;
  }
  EXPECT_EQ(py.ParseControl(std::string(Runtime::kMaxControlBytes + 1, ' ')).status().code(),
            Code::kOutputLimit);
  // Random bytes and every prefix of a valid frame: some answer, no crash.
  std::mt19937 rng(42);
  const std::string valid = R"({"exit_code":0,"result":{"k":[1,2,"\u00e9"]}})";
  for (size_t i = 0; i < valid.size(); ++i) (void)py.ParseControl(valid.substr(0, i));
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    (void)py.ParseControl(s);
    (void)sh.ParseControl(s);
  }
}

TEST(ParseControl, ShellResultBecomesAJsonString) {
  Runtime sh = Make(Language::kShell);
  auto out = sh.ParseControl("0\nr\"quoted\"\n\xff");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_EQ(json::parse(out->result_json), "\"quoted\"\n\xef\xbf\xbd");  // U+FFFD
  auto empty = sh.ParseControl("3\nr");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->result_json, "\"\"");
  auto unset = sh.ParseControl("3\n");
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->exit_code, 3);
  EXPECT_EQ(unset->result_json, "");
}

// ---------------------------------------------------------------- all wrappers

TEST(Wrappers, EmptyFrameRetiresTheWarmSandboxQuietly) {
  for (Language lang : {Language::kPython, Language::kJavaScript, Language::kShell}) {
    RunOutput run = RunWrapper(Make(lang), "");
    EXPECT_EQ(run.exit_status, 0) << LanguageName(lang);
    EXPECT_EQ(run.stdout_data + run.stderr_data + run.control, "") << LanguageName(lang);
  }
}

TEST(Wrappers, CodeWithFakeMarkersQuotesAndBackslashesRunsVerbatim) {
  const std::string text =
      R"(__FM_RESULT_START__ \\n ''' """ ` ${x} $(y) é )kiln_wrapper" {"exit_code": 9})";
  const std::string quoted = json(text).dump();
  EXPECT_EQ(Result(RunJob(Language::kPython, "result = " + quoted)), text);
  EXPECT_EQ(Result(RunJob(Language::kJavaScript, "result = " + quoted + ";")), text);
  EXPECT_EQ(Result(RunJob(Language::kShell, "result=$(cat <<'EOF'\n" + text + "\nEOF\n)")), text);
}

// ---------------------------------------------------------------- Python, for real

TEST(PythonWrapper, StdoutStderrAndExitCode) {
  Job j = RunJob(Language::kPython, "import sys\nprint('out')\nprint('err', file=sys.stderr)");
  EXPECT_EQ(j.run.stdout_data, "out\n");
  EXPECT_EQ(j.run.stderr_data, "err\n");
  EXPECT_EQ(j.run.exit_status, 0);
  EXPECT_TRUE(j.outcome.has_frame);
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_EQ(j.outcome.result_json, "");
  EXPECT_FALSE(j.outcome.error.has_value());
}

TEST(PythonWrapper, InputBecomesGlobalsAndResultRoundTrips) {
  Job j = RunJob(Language::kPython,
                 "result = {'n': n, 'f': f, 'big': big, 's': s, 'nested': nested, 'empty': empty}\n"
                 "assert isinstance(n, int) and nested['a'][1]['b'] is None",
                 kRichInput);
  EXPECT_EQ(j.run.exit_status, 0) << j.run.stderr_data;
  EXPECT_EQ(Result(j), json::parse(kRichInput));
}

TEST(PythonWrapper, ExceptionGivesTypeMessageTracebackWithoutWrapperFrames) {
  Job j = RunJob(Language::kPython, "x = 1\ndef f():\n    return x / 0\nf()\n");
  EXPECT_EQ(j.run.exit_status, 1);
  EXPECT_EQ(j.outcome.exit_code, 1);
  ASSERT_TRUE(j.outcome.error.has_value());
  EXPECT_EQ(j.outcome.error->type, "ZeroDivisionError");
  EXPECT_EQ(j.outcome.error->message, "division by zero");
  EXPECT_EQ(j.outcome.error->traceback,
            "Traceback (most recent call last):\n"
            "  File \"<code>\", line 4, in <module>\n"
            "    f()\n"
            "  File \"<code>\", line 3, in f\n"
            "    return x / 0\n"
            "           ~~^~~\n"
            "ZeroDivisionError: division by zero\n");
  EXPECT_EQ(j.run.stderr_data, j.outcome.error->traceback);  // printed as python would
}

TEST(PythonWrapper, SyntaxErrorIsReported) {
  Job j = RunJob(Language::kPython, "x = (\n");
  EXPECT_EQ(j.run.exit_status, 1);
  ASSERT_TRUE(j.outcome.error.has_value());
  EXPECT_EQ(j.outcome.error->type, "SyntaxError");
  EXPECT_THAT(j.outcome.error->traceback, StartsWith("  File \"<code>\", line 1\n"));
}

TEST(PythonWrapper, SysExitSetsTheCodeWithoutErrorAndKeepsResult) {
  Job j = RunJob(Language::kPython, "import sys\nresult = 'partial'\nsys.exit(3)\nresult = 'no'");
  EXPECT_EQ(j.run.exit_status, 3);
  EXPECT_EQ(j.outcome.exit_code, 3);
  EXPECT_EQ(Result(j), "partial");
  EXPECT_FALSE(j.outcome.error.has_value());
  Job msg = RunJob(Language::kPython, "import sys\nsys.exit('bye')");
  EXPECT_EQ(msg.run.exit_status, 1);
  EXPECT_EQ(msg.run.stderr_data, "bye\n");
  EXPECT_FALSE(msg.outcome.error.has_value());
}

TEST(PythonWrapper, ResultNoneIsNullAndUnsetIsAbsent) {
  EXPECT_EQ(RunJob(Language::kPython, "result = None").outcome.result_json, "null");
  EXPECT_EQ(RunJob(Language::kPython, "results = 1").outcome.result_json, "");
}

TEST(PythonWrapper, NonSerializableResultIsAnErrorWithExitCodeZero) {
  Job j = RunJob(Language::kPython, "result = object()");
  EXPECT_EQ(j.run.exit_status, 0);
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_EQ(j.outcome.result_json, "");
  ASSERT_TRUE(j.outcome.error.has_value());
  EXPECT_EQ(j.outcome.error->type, "ResultNotSerializable");
  EXPECT_EQ(j.outcome.error->message, "Object of type object is not JSON serializable");
  EXPECT_EQ(RunJob(Language::kPython, "result = float('nan')").outcome.error->type,
            "ResultNotSerializable");
  // Sets (and numpy values, via tolist) are converted.
  EXPECT_EQ(Result(RunJob(Language::kPython, "result = {'s': {3}, 't': (1, 2)}")),
            json::parse(R"({"s": [3], "t": [1, 2]})"));
}

TEST(PythonWrapper, EnvMapIsAppliedOverTheBaseEnv) {
  Job j = RunJob(Language::kPython,
                 "import os\nresult = [os.environ['FOO'], os.environ['HOME'], os.environ['PATH']]",
                 "", {{"FOO", "b\u00e4r \"x\"\n"}});
  EXPECT_EQ(Result(j), json::parse(R"(["b\u00e4r \"x\"\n", "/workspace",
                                      "/usr/local/bin:/usr/bin:/bin"])"));
}

TEST(PythonWrapper, StdinIsEmptyForUserCode) {
  Job j = RunJob(Language::kPython,
                 "import sys, subprocess\n"
                 "result = [sys.stdin.read(), subprocess.run(['cat'], capture_output=True).stdout"
                 ".decode()]");
  EXPECT_EQ(Result(j), json::parse(R"(["", ""])"));
}

TEST(PythonWrapper, OutputCannotForgeTheControlChannel) {
  Job j = RunJob(Language::kPython,
                 "import sys\n"
                 "sys.stdout.buffer.write(b'{\"exit_code\": 7, \"result\": 1}\\n\\0\\xff\\xfe')\n"
                 "sys.stdout.buffer.write(b'x' * 1048576)\n"
                 "sys.stderr.buffer.write(b'{\"exit_code\": 9}\\0\\xc3')\n"
                 "result = 'real'");
  EXPECT_EQ(j.run.exit_status, 0);
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_EQ(Result(j), "real");
  EXPECT_EQ(j.run.stdout_data, std::string("{\"exit_code\": 7, \"result\": 1}\n\0\xff\xfe", 33) +
                                   std::string(1048576, 'x'));
  EXPECT_EQ(j.run.stderr_data, std::string("{\"exit_code\": 9}\0\xc3", 18));
}

TEST(PythonWrapper, ChildProcessesDoNotInheritTheControlFd) {
  Job j = RunJob(Language::kPython,
                 "import os, subprocess\n"
                 "p = subprocess.run(['readlink', '/proc/self/fd/3'], capture_output=True)\n"
                 "q = subprocess.run(['readlink', '/proc/self/fd/3'], capture_output=True,"
                 " close_fds=False)\n"
                 "os.system('readlink /proc/self/fd/3 || echo closed')\n"
                 "result = [p.returncode, p.stdout.decode(), q.returncode]");
  EXPECT_EQ(Result(j), json::parse(R"([1, "", 1])"));
  EXPECT_EQ(j.run.stdout_data, "closed\n");
}

TEST(PythonWrapper, CodeIsCompiledFromBytes) {
  Job latin = RunJob(Language::kPython, "# -*- coding: latin-1 -*-\nresult = '\xe9'");
  EXPECT_EQ(Result(latin), "\u00e9");
  Job invalid = RunJob(Language::kPython, "result = '\xff'");
  ASSERT_TRUE(invalid.outcome.error.has_value());
  EXPECT_EQ(invalid.outcome.error->type, "SyntaxError");
  Job nul = RunJob(Language::kPython, std::string("x = 1\0", 6));
  ASSERT_TRUE(nul.outcome.error.has_value());  // ValueError up to 3.11, then SyntaxError
  EXPECT_THAT(nul.outcome.error->type, ::testing::AnyOf("ValueError", "SyntaxError"));
}

TEST(PythonWrapper, ResultIsReadAfterThreadsFinishAndMainIsAModule) {
  Job j = RunJob(Language::kPython,
                 "import threading, time, pickle, dataclasses\n"
                 "@dataclasses.dataclass\nclass P:\n    x: int\n"
                 "def later():\n    global result\n    time.sleep(0.1)\n"
                 "    result = [__name__, pickle.loads(pickle.dumps(P(5))).x]\n"
                 "threading.Thread(target=later).start()\n");
  EXPECT_EQ(Result(j), json::parse(R"(["__main__", 5])")) << j.run.stderr_data;
}

// Once the control frame is written the worker has the whole job; the
// interpreter's teardown (module dicts cleared, objects freed: a third of a
// zygote child's CPU, docs/performance.md) is skipped, so a global's
// __del__ does not run, and the exit code is still the job's.
TEST(PythonWrapper, NoInterpreterTeardownAfterTheFrame) {
  char dir[] = "/tmp/kiln-teardown-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string mark = std::string(dir) + "/deleted";
  Job j = RunJob(Language::kPython,
                 "import sys\nclass D:\n    def __del__(self, _open=open):\n        _open('" +
                     mark + "', 'w').close()\nd = D()\nresult = 1\nsys.exit(3)");
  EXPECT_EQ(j.run.exit_status, 3);
  EXPECT_EQ(Result(j), 1) << j.run.stderr_data;
  EXPECT_NE(::access(mark.c_str(), F_OK), 0) << "the interpreter tore its objects down";
  ::unlink(mark.c_str());
  ::rmdir(dir);
}

// The frame is written straight after the code when nothing else would run
// at exit; a handler the code registered still runs first, and sees the code's
// globals as the frame will.
TEST(PythonWrapper, AtexitHandlersRunBeforeTheFrame) {
  Job j = RunJob(Language::kPython,
                 "import atexit\nresult = 1\n"
                 "def later():\n    global result\n    result = result + 1\n"
                 "atexit.register(later)\n");
  EXPECT_EQ(j.run.exit_status, 0) << j.run.stderr_data;
  EXPECT_EQ(Result(j), 2) << j.run.stderr_data;
}

// A file object among the globals is flushed before the frame, however the
// job ends.
TEST(PythonWrapper, FilesLeftOpenInTheGlobalsAreFlushed) {
  char dir[] = "/tmp/kiln-flush-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  for (const char* end : {"", "raise ValueError('x')\n"}) {
    const std::string path = std::string(dir) + "/out.txt";
    Job j = RunJob(Language::kPython, "f = open('" + path + "', 'w')\nf.write('kept')\n" + end);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "kept") << end << j.run.stderr_data;
    ::unlink(path.c_str());
  }
  ::rmdir(dir);
}

TEST(PythonWrapper, OsExitWritesNoFrame) {
  Job j = RunJob(Language::kPython, "import os\nresult = 1\nos._exit(4)");
  EXPECT_EQ(j.run.exit_status, 4);
  EXPECT_FALSE(j.outcome.has_frame);
}

// ---------------------------------------------------------------- JavaScript, for real

TEST(JavaScriptWrapper, StdoutStderrAndExitCode) {
  Job j = RunJob(Language::kJavaScript, "console.log('out'); console.error('err');");
  EXPECT_EQ(j.run.stdout_data, "out\n");
  EXPECT_EQ(j.run.stderr_data, "err\n");
  EXPECT_EQ(j.run.exit_status, 0);
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_EQ(j.outcome.result_json, "");
  EXPECT_FALSE(j.outcome.error.has_value());
}

TEST(JavaScriptWrapper, InputBecomesGlobalsAndResultRoundTrips) {
  Job j = RunJob(Language::kJavaScript,
                 "if (typeof n !== 'number' || nested.a[1].b !== null) throw new Error('types');\n"
                 "result = {n, f, big, s, nested, empty};",
                 kRichInput);
  EXPECT_EQ(j.run.exit_status, 0) << j.run.stderr_data;
  EXPECT_EQ(Result(j), json::parse(kRichInput));
}

TEST(JavaScriptWrapper, TypeErrorGivesNameMessageStackWithoutWrapperFrames) {
  Job j = RunJob(Language::kJavaScript, "function f(o) {\n  return o.x;\n}\nf(null);\n");
  EXPECT_EQ(j.run.exit_status, 1);
  EXPECT_EQ(j.outcome.exit_code, 1);
  ASSERT_TRUE(j.outcome.error.has_value());
  EXPECT_EQ(j.outcome.error->type, "TypeError");
  EXPECT_EQ(j.outcome.error->message, "Cannot read properties of null (reading 'x')");
  EXPECT_THAT(j.outcome.error->traceback,
              HasSubstr("TypeError: Cannot read properties of null (reading 'x')\n"
                        "    at f (<code>:2:12)\n"
                        "    at <code>:4:1"));
  EXPECT_THAT(j.outcome.error->traceback, Not(HasSubstr("[eval]")));
  EXPECT_THAT(j.outcome.error->traceback, Not(HasSubstr("node:")));
  EXPECT_EQ(j.run.stderr_data, j.outcome.error->traceback + "\n");
}

TEST(JavaScriptWrapper, ThrownNonErrorValue) {
  Job j = RunJob(Language::kJavaScript, "throw 'boom';");
  EXPECT_EQ(j.run.exit_status, 1);
  ASSERT_TRUE(j.outcome.error.has_value());
  EXPECT_EQ(j.outcome.error->type, "ThrownValue");
  EXPECT_EQ(j.outcome.error->message, "boom");
  EXPECT_EQ(j.run.stderr_data, "Uncaught 'boom'\n");
  Job obj = RunJob(Language::kJavaScript, "setTimeout(() => { throw {code: 7}; }, 1);");
  ASSERT_TRUE(obj.outcome.error.has_value());
  EXPECT_EQ(obj.outcome.error->message, "{ code: 7 }");
}

TEST(JavaScriptWrapper, UnhandledRejectionFailsTheJob) {
  Job j = RunJob(Language::kJavaScript,
                 "async function f() { throw new RangeError('late'); }\nf();\nresult = 1;");
  EXPECT_EQ(j.run.exit_status, 1);
  ASSERT_TRUE(j.outcome.error.has_value());
  EXPECT_EQ(j.outcome.error->type, "RangeError");
  EXPECT_EQ(j.outcome.error->message, "late");
  EXPECT_EQ(Result(j), 1);
}

TEST(JavaScriptWrapper, ProcessExitSetsTheCodeAndKeepsResult) {
  Job j = RunJob(Language::kJavaScript,
                 "result = 'partial'; setTimeout(() => {}, 10000); process.exit(3);");
  EXPECT_EQ(j.run.exit_status, 3);
  EXPECT_EQ(j.outcome.exit_code, 3);
  EXPECT_EQ(Result(j), "partial");
  EXPECT_FALSE(j.outcome.error.has_value());
  EXPECT_EQ(RunJob(Language::kJavaScript, "process.exitCode = 5;").outcome.exit_code, 5);
}

TEST(JavaScriptWrapper, TopLevelLetAndConstResult) {
  EXPECT_EQ(Result(RunJob(Language::kJavaScript, "let result = [1, 'a'];")),
            json::parse(R"([1, "a"])"));
  EXPECT_EQ(Result(RunJob(Language::kJavaScript, "const result = {k: null};")),
            json::parse(R"({"k": null})"));
  EXPECT_EQ(RunJob(Language::kJavaScript, "let x = 1;").outcome.result_json, "");
  EXPECT_EQ(RunJob(Language::kJavaScript, "result = undefined;").outcome.result_json, "");
}

TEST(JavaScriptWrapper, AsyncTimersAndPromisesFinishBeforeTheResultIsRead) {
  EXPECT_EQ(Result(RunJob(Language::kJavaScript,
                          "result = 1; setTimeout(() => { result = 'late'; }, 50);")),
            "late");
  EXPECT_EQ(Result(RunJob(Language::kJavaScript,
                          "result = new Promise((r) => setTimeout(() => r({v: 2}), 20));")),
            json::parse(R"({"v": 2})"));
  Job tla = RunJob(Language::kJavaScript,
                   "const v = await new Promise((r) => setTimeout(() => r(20), 20));\n"
                   "let result = v + 1;");
  EXPECT_EQ(Result(tla), 21) << tla.run.stderr_data;
  Job tla_err = RunJob(Language::kJavaScript, "await null;\nnull.y;");
  ASSERT_TRUE(tla_err.outcome.error.has_value());
  EXPECT_EQ(tla_err.outcome.error->type, "TypeError");
  EXPECT_THAT(tla_err.outcome.error->traceback, HasSubstr("<code>:2:6"));
  Job never = RunJob(Language::kJavaScript, "result = new Promise(() => {});");
  ASSERT_TRUE(never.outcome.error.has_value());
  EXPECT_EQ(never.outcome.error->type, "ResultNotSerializable");
}

TEST(JavaScriptWrapper, NonSerializableResult) {
  for (const char* code :
       {"result = () => 1;", "result = 10n;", "result = {}; result.self = result;"}) {
    Job j = RunJob(Language::kJavaScript, code);
    EXPECT_EQ(j.run.exit_status, 0) << code;
    EXPECT_EQ(j.outcome.result_json, "") << code;
    ASSERT_TRUE(j.outcome.error.has_value()) << code;
    EXPECT_EQ(j.outcome.error->type, "ResultNotSerializable") << code;
  }
  // Lone surrogates cannot cross as JSON text: replaced.
  EXPECT_EQ(Result(RunJob(Language::kJavaScript, "result = 'a\\ud800b';")), "a\ufffdb");
}

TEST(JavaScriptWrapper, EnvRequireAndEmptyStdin) {
  Job j = RunJob(Language::kJavaScript,
                 "const fs = require('fs');\n"
                 "result = [process.env.FOO, process.env.HOME, require('path').join('a', 'b'),\n"
                 "          fs.readFileSync(0).length,\n"
                 "          require('child_process').execSync('cat').toString()];",
                 "", {{"FOO", "bar"}});
  EXPECT_EQ(Result(j), json::parse(R"(["bar", "/workspace", "a/b", 0, ""])")) << j.run.stderr_data;
}

TEST(JavaScriptWrapper, OutputCannotForgeTheControlChannel) {
  Job j = RunJob(Language::kJavaScript,
                 "process.stdout.write(Buffer.from('{\"exit_code\":7}\\n\\0\\xff', 'latin1'));\n"
                 "process.stdout.write('x'.repeat(1048576));\n"
                 "process.stderr.write('{\"exit_code\":9}\\0');\n"
                 "result = 'real';");
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_EQ(Result(j), "real");
  EXPECT_EQ(j.run.stdout_data,
            std::string("{\"exit_code\":7}\n\0\xff", 18) + std::string(1048576, 'x'));
  EXPECT_EQ(j.run.stderr_data, std::string("{\"exit_code\":9}\0", 16));
}

TEST(JavaScriptWrapper, ChildProcessesDoNotInheritTheControlFd) {
  Job j = RunJob(Language::kJavaScript,
                 "result = require('child_process')"
                 ".execSync('readlink /proc/self/fd/3 || echo closed').toString();");
  EXPECT_EQ(Result(j), "closed\n");
}

// ---------------------------------------------------------------- shell, for real

TEST(ShellWrapper, StdoutStderrAndExitStatusOfTheLastCommand) {
  Job j = RunJob(Language::kShell, "echo out\necho err >&2\nfalse");
  EXPECT_EQ(j.run.stdout_data, "out\n");
  EXPECT_EQ(j.run.stderr_data, "err\n");
  EXPECT_EQ(j.run.exit_status, 1);
  EXPECT_EQ(j.outcome.exit_code, 1);
  EXPECT_EQ(j.outcome.result_json, "");
  EXPECT_FALSE(j.outcome.error.has_value());
}

TEST(ShellWrapper, InputBecomesEnvironmentVariables) {
  Job j = RunJob(Language::kShell,
                 "printf '%s|' \"$n\" \"$s\" \"$nested\" \"$empty\" \"$#\"\n"
                 "sh -c 'printf \"%s|\" \"$f\"'",
                 kRichInput);
  EXPECT_EQ(j.run.exit_status, 0) << j.run.stderr_data;
  json in = json::parse(kRichInput);
  EXPECT_EQ(j.run.stdout_data,
            "42|" + in["s"].get<std::string>() + "|" + in["nested"].dump() + "||0|-1.5|");
}

TEST(ShellWrapper, ResultIsAStringAndUnsetDiffersFromEmpty) {
  EXPECT_EQ(Result(RunJob(Language::kShell, "result=\"a 'b' \\\"c\\\"\n\u00e9\"")),
            "a 'b' \"c\"\n\u00e9");
  EXPECT_EQ(RunJob(Language::kShell, "result=").outcome.result_json, "\"\"");
  Job unset = RunJob(Language::kShell, "x=1");
  EXPECT_TRUE(unset.outcome.has_frame);
  EXPECT_EQ(unset.outcome.result_json, "");
  EXPECT_EQ(Result(RunJob(Language::kShell, "true", R"({"result": [1]})")), "[1]");
}

TEST(ShellWrapper, ExitEndsTheShellWithoutAFrame) {
  Job j = RunJob(Language::kShell, "result=x\nexit 3\necho no");
  EXPECT_EQ(j.run.exit_status, 3);
  EXPECT_FALSE(j.outcome.has_frame);
  EXPECT_EQ(j.run.stdout_data, "");
}

TEST(ShellWrapper, EnvMapStdinAndQuoting) {
  Job j = RunJob(Language::kShell,
                 "result=\"$FOO|$HOME|$(cat | wc -c)|$(printf '%s' 'q\"\\\\')\"\n"
                 "cat <<'EOF'\n$not_expanded `x`\nEOF",
                 "", {{"FOO", "b\u00e4r\n'x'"}});
  EXPECT_EQ(Result(j), "b\u00e4r\n'x'|/workspace|0|q\"\\\\");
  EXPECT_EQ(j.run.stdout_data, "$not_expanded `x`\n");
}

TEST(ShellWrapper, OutputCannotForgeTheControlChannel) {
  Job j = RunJob(Language::kShell,
                 "printf '0\\nrfake\\0\\377'\nhead -c 1048576 /dev/zero | tr '\\0' x\n"
                 "printf '1\\n' >&2\nresult=real");
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_EQ(Result(j), "real");
  EXPECT_EQ(j.run.stdout_data, std::string("0\nrfake\0\xff", 9) + std::string(1048576, 'x'));
  EXPECT_EQ(j.run.stderr_data, "1\n");
}

TEST(ShellWrapper, ChildProcessesDoNotInheritTheControlFd) {
  Job j = RunJob(Language::kShell,
                 "readlink /proc/self/fd/3 || echo closed\n"
                 "sh -c 'readlink /proc/self/fd/3 || echo closed'\n"
                 "echo fake >&3 || echo cannot");
  EXPECT_EQ(j.run.stdout_data, "closed\nclosed\ncannot\n");
  EXPECT_EQ(j.outcome.exit_code, 0);
}

TEST(ShellWrapper, SyntaxErrorIsExitStatusTwo) {
  Job j = RunJob(Language::kShell, "if then");
  EXPECT_EQ(j.run.exit_status, 2);
  EXPECT_THAT(j.run.stderr_data, HasSubstr("syntax error"));
}

// ---------------------------------------------------------------- stdin

TEST(EncodeJob, StdinGoesInTheHeaderOnlyWhenGiven) {
  Runtime py = Make(Language::kPython);
  auto plain = py.EncodeJob("1", "", {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "{\"env\":{},\"input\":{}}\n1");  // as before stdin existed
  auto with = py.EncodeJob("1", "", {}, "a\nb");
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, "{\"env\":{},\"input\":{},\"stdin\":\"a\\nb\"}\n1");
  auto sh = Make(Language::kShell).EncodeJob("x", "", {{"A", "1"}}, "hi");
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(*sh, "__kiln_stdin=2;export A=$'\\x31'\nhix.");
}

TEST(EncodeJob, StdinIsBoundedUtf8AndShellRefusesNul) {
  for (Language l : {Language::kPython, Language::kJavaScript, Language::kShell}) {
    Runtime rt = Make(l);
    EXPECT_TRUE(rt.EncodeJob("1", "", {}, std::string(1 << 20, 'x')).ok());
    auto big = rt.EncodeJob("1", "", {}, std::string((1 << 20) + 1, 'x'));
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.status().code(), Code::kInvalidRequest);
    EXPECT_THAT(big.status().message(), StartsWith("stdin: "));
    EXPECT_EQ(rt.EncodeJob("1", "", {}, "\xff").status().code(), Code::kInvalidRequest);
    // The same rules for a session's execution.
    EXPECT_EQ(rt.EncodeExecution("1", "", {}, std::string((1 << 20) + 1, 'x')).status().code(),
              Code::kInvalidRequest);
  }
  EXPECT_TRUE(Make(Language::kPython).EncodeJob("1", "", {}, std::string("a\0b", 3)).ok());
  auto nul = Make(Language::kShell).EncodeJob("1", "", {}, std::string("a\0b", 3));
  ASSERT_FALSE(nul.ok());
  EXPECT_THAT(nul.status().message(), HasSubstr("NUL"));
}

// The code and the processes it starts read the job's stdin on fd 0.
TEST(PythonWrapper, StdinIsOnFdZeroForTheCodeAndItsChildren) {
  Job j = RunJob(Language::kPython,
                 "import os, subprocess, sys\n"
                 "head = os.read(0, 9).decode()\n"
                 "child = subprocess.run(['cat'], capture_output=True, text=True).stdout\n"
                 "result = [head, child, sys.stdin.read()]",
                 "", {}, "line one\nline two \u00e9\n");
  EXPECT_EQ(j.outcome.exit_code, 0) << j.run.stderr_data;
  // The child read on from where the code stopped: one file offset, fd 0's.
  EXPECT_EQ(Result(j), json::array({"line one\n", "line two \u00e9\n", ""}));
  Job whole = RunJob(Language::kPython, "import sys\nresult = sys.stdin.read()", "", {}, "a\nb");
  EXPECT_EQ(Result(whole), "a\nb");
}

TEST(JavaScriptWrapper, StdinIsOnFdZeroForTheCodeAndItsChildren) {
  Job j =
      RunJob(Language::kJavaScript,
             "const fs = require('fs');\n"
             "const cp = require('child_process');\n"
             "const child = cp.execSync('cat', {stdio: ['inherit', 'pipe', 'pipe']}).toString();\n"
             "result = [child, fs.readFileSync(0).toString()];",
             "", {}, "from stdin\n");
  EXPECT_EQ(j.outcome.exit_code, 0) << j.run.stderr_data;
  // The child read to EOF first: the shared file offset left nothing for node.
  EXPECT_EQ(Result(j), json::array({"from stdin\n", ""}));
}

TEST(ShellWrapper, StdinIsOnFdZeroForTheCodeAndItsChildren) {
  Job j = RunJob(Language::kShell, "read -r line\nresult=$line\ncat\nls -a /tmp", "", {},
                 "first\nsecond\n");
  EXPECT_EQ(j.outcome.exit_code, 0) << j.run.stderr_data;
  EXPECT_EQ(Result(j), "first");
  EXPECT_THAT(j.run.stdout_data, StartsWith("second\n"));
  EXPECT_THAT(j.run.stdout_data, Not(HasSubstr("kiln-stdin")));  // removed once open
}

// 1 MiB of stdin in well under a second: it stays out of the header line,
// whose split costs bash the square of its length (minutes for 256 KiB).
TEST(ShellWrapper, AMebibyteOfStdinIsQuick) {
  const auto start = std::chrono::steady_clock::now();
  Job j = RunJob(Language::kShell, "wc -c", "", {}, std::string(1 << 20, 'x'));
  EXPECT_EQ(j.run.stdout_data, "1048576\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// ---------------------------------------------------------------- rich outputs

TEST(ParseControl, DecodesOutputsAndBoundsThem) {
  Runtime rt = Make(Language::kPython);
  auto o = rt.ParseControl(
      R"({"exit_code": 0, "outputs": [{"mime": "text/plain", "text": "5"},
          {"mime": "image/png", "base64": "AAEC"}, {"mime": "bad mime", "text": "x"}]})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->outputs.size(), 2u);
  EXPECT_EQ(o->outputs[0], (common::protocol::RichOutput{"text/plain", "5"}));
  EXPECT_EQ(o->outputs[1], (common::protocol::RichOutput{"image/png", std::string("\0\1\2", 3)}));
  EXPECT_TRUE(o->outputs_truncated);  // the bad mime type was dropped

  std::string many = R"({"exit_code": 0, "outputs": [)";
  for (int i = 0; i < 40; ++i)
    many += std::string(i ? "," : "") + R"({"mime": "text/plain", "text": "x"})";
  auto m = rt.ParseControl(many + "]}");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->outputs.size(), common::protocol::kMaxRichOutputs);
  EXPECT_TRUE(m->outputs_truncated);

  auto plain = rt.ParseControl(R"({"exit_code": 0, "outputs_truncated": true})");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->outputs.empty());
  EXPECT_TRUE(plain->outputs_truncated);

  for (const char* bad :
       {R"({"exit_code": 0, "outputs": {}})", R"({"exit_code": 0, "outputs": [{"text": "x"}]})",
        R"({"exit_code": 0, "outputs": [{"mime": "a/b"}]})",
        R"({"exit_code": 0, "outputs": [{"mime": "a/b", "base64": "!!"}]})",
        R"({"exit_code": 0, "outputs_truncated": 1})"}) {
    auto r = rt.ParseControl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInternal) << bad;
  }
}

TEST(PythonWrapper, NoOutputsWithoutPyplotAndNoEchoInOneShot) {
  // The one-shot wrapper keeps its `result` rules: a final expression is not echoed.
  Job j = RunJob(Language::kPython, "import sys\nx = 5\nx");
  EXPECT_EQ(j.outcome.exit_code, 0);
  EXPECT_TRUE(j.outcome.result_json.empty());
  EXPECT_TRUE(j.outcome.outputs.empty());
  EXPECT_FALSE(j.outcome.outputs_truncated);
  Job m = RunJob(Language::kPython, "import sys\nresult = 'matplotlib' in sys.modules");
  EXPECT_EQ(Result(m), false);  // the wrapper never imports it
}

}  // namespace
}  // namespace kiln::worker::runtimes
