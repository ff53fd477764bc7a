// The main() of ember's example programs: parse the command line, print the
// usage text for --help, run, and turn what escapes into an exit status.
//
// Contract:
// - run_main(program, argc, argv, parse, usage, run) calls parse(argc, argv).
//   A UsageError from it prints "program: <message>", a blank line and
//   usage() on stderr and returns 2. Options with help set print usage() on
//   stdout and return 0. Otherwise it returns run(options).
// - A UsageError from run (a check that needs the data or a checkpoint)
//   prints "program: <message> (program --help lists the flags)" and returns
//   2; any other std::exception prints "program: error: <message>" and
//   returns 1. Errors a program reports in its own way it catches in run.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "examples/common/flags.h"

namespace ember::examples {

template <typename Parse, typename Usage, typename Run>
int run_main(const char* program, int argc, const char* const* argv, Parse parse, Usage usage, Run run) {
  decltype(parse(argc, argv)) options;
  try {
    options = parse(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", program, e.what(), usage().c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    return run(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (%s --help lists the flags)\n", program, e.what(), program);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace ember::examples
