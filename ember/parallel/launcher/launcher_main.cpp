// ember-run's main(): ember/parallel/launcher/launcher.h does the work; this maps its
// outcomes to exit statuses (2 for bad arguments, as usage errors usually are).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ember/parallel/launcher/launcher.h"

int main(int argc, char** argv) {
  using namespace ember::parallel;
  try {
    LauncherOptions options = parse_launcher_args(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::fputs(launcher_usage().c_str(), stdout);
      return 0;
    }
    return run_launcher(options);
  } catch (const LauncherUsageError& e) {
    std::fprintf(stderr, "ember-run: %s\n(ember-run --help lists the options)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-run: %s\n", e.what());
    return 1;
  }
}
