# frozen_string_literal: true

# rakelib/sidecar.rake - builds the C sidecar into lib/webhook_inbox/ with `rake compile`,
# and adds its unit tests, include-cycle check, sanitizer build and valgrind run to `rake c_tests`.
# The black-box specs (spec/sidecar/*_spec.rb) run with `rake spec`.
require "tmpdir"

SIDECAR_BIN = "sidecar/build/webhook-inbox-sidecar"
SIDECAR_LIB_BIN = "lib/webhook_inbox/webhook-inbox-sidecar"

namespace :sidecar do
  desc "Build webhook-inbox-sidecar and copy it to #{SIDECAR_LIB_BIN}"
  task :build do
    sh "make", "-C", "sidecar", "-j2", "--no-print-directory", "-s"
    unless File.exist?(SIDECAR_LIB_BIN) && FileUtils.compare_file(SIDECAR_BIN, SIDECAR_LIB_BIN)
      rm_f SIDECAR_LIB_BIN
      cp SIDECAR_BIN, SIDECAR_LIB_BIN
      chmod 0o755, SIDECAR_LIB_BIN
    end
  end

  desc "Sidecar C unit tests"
  task :test do
    sh "make", "-C", "sidecar", "-j2", "--no-print-directory", "-s", "test"
  end

  desc "No include cycles among sidecar/src's modules (and the check still catches one: a planted pair must fail)"
  task :include_cycles do
    check = "sidecar/tools/include_cycles.rb"
    sh RbConfig.ruby, check
    Dir.mktmpdir("wi-cycles-") do |dir|
      mkdir_p ["#{dir}/a", "#{dir}/b"], verbose: false
      File.write("#{dir}/a/one.h", %(#include "b/two.h"\n))
      File.write("#{dir}/b/two.h", "/* two.h */\n")
      File.write("#{dir}/b/two.c", %(#include "b/two.h"\n#include "a/one.h"\n))
      ok = system(RbConfig.ruby, check, dir, err: File::NULL)
      abort "sidecar:include_cycles: #{check} passed a planted cycle (a/one.h -> b/two.h, b/two.c -> a/one.h)" if ok
    end
  end

  desc "Sidecar built and unit-tested under ASan + UBSan, then run against a throwaway PostgreSQL"
  task :asan do
    sh "make", "-C", "sidecar", "-j2", "--no-print-directory", "-s", "asan"
    sh RbConfig.ruby, "sidecar/test/valgrind_run.rb", "sidecar/build/asan/webhook-inbox-sidecar", "--sanitizer"
  end

  desc "valgrind: migrate, stats and a short `run --once` against a throwaway PostgreSQL, no leaks"
  task valgrind: :build do
    sh RbConfig.ruby, "sidecar/test/valgrind_run.rb", SIDECAR_BIN
  end

  desc "libFuzzer runs: the configuration parsers (flags, --config file, durations) and the metrics HTTP request parser (FUZZ_TIME s each)"
  task :fuzz do
    abort "sidecar:fuzz: clang-14 not found (run bin/setup)" unless system("command -v clang-14 >/dev/null 2>&1")
    sh "make", "-s", "-C", "sidecar/fuzz", "run", "FUZZ_TIME=#{ENV.fetch('FUZZ_TIME', '8')}"
  end
end

task compile: "sidecar:build"
task c_tests: ["sidecar:test", "sidecar:include_cycles", "sidecar:asan", "sidecar:valgrind", "sidecar:fuzz"]
