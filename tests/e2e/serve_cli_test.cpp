// `lingbot-map serve` from the outside: bad options end in one line; the server prints its URL,
// serves, and on SIGTERM closes its streams (close 1001) and exits 0.
#ifdef LINGBOT_HAVE_SERVER
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>
#include <thread>

#include "serve_client.h"
#include "test_util.h"

namespace lingbot {
namespace {

using namespace test::serve;
const std::string kServe = "serve --model synthetic:1 --arch tiny --threads 1 ";

TEST(ServeCli, BadOptionsAreOneLine) {
  test::expect_clean_cli_failure(kServe + "--port 0 --host nowhere", "--host");
  test::expect_clean_cli_failure(kServe + "--port 0 --token-file /nonexistent/token",
                                 "--token-file");
}

TEST(ServeCli, PrintsItsUrlServesAndStopsOnSigterm) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::execl(LINGBOT_CLI, LINGBOT_CLI, "serve", "--model", "synthetic:1", "--arch", "tiny",
            "--threads", "1", "--port", "0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  FILE* f = ::fdopen(out[0], "r");
  char line[512] = {};
  ASSERT_NE(std::fgets(line, sizeof line, f), nullptr);
  std::cmatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex("^serving http://127\\.0\\.0\\.1:(\\d+)/")))
      << line;
  const int port = std::stoi(m[1]);
  EXPECT_EQ(get(port, "/healthz").body, "ok\n");

  Script s;  // a stream that stays open
  s.text(R"({"type":"start","width":640,"height":480})");
  StreamClient client(port, s);
  Stream got;
  std::thread t([&] { got = client.run(); });
  // The stream is admitted once /v1/info lists it; then the server is told to stop.
  for (int i = 0; i < 100000 && json::parse(get(port, "/v1/info").body).at("sessions").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGTERM);
  t.join();
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::fclose(f);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_NE(got.find("ready"), nullptr) << got.describe();
  EXPECT_EQ(got.close_code, 1001) << got.describe();
}

}  // namespace
}  // namespace lingbot
#endif
