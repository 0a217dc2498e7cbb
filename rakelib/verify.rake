# frozen_string_literal: true

# verify.rake - C suites of the verification core, hooked into :c_tests (and so :test_all):
# unit tests, the same tests under ASan/UBSan, and bounded libFuzzer runs.
namespace :verify do
  dir = File.expand_path("../ext/webhook_inbox", __dir__)
  fuzz_time = ENV.fetch("FUZZ_TIME", "8")

  desc "Verification core C unit tests (ext/webhook_inbox/test)"
  task :ctest do
    sh "make", "-s", "-C", "#{dir}/test", "test"
  end

  desc "Verification core C unit tests under -fsanitize=address,undefined"
  task :asan do
    sh "make", "-s", "-C", "#{dir}/test", "asan"
  end

  desc "libFuzzer runs of the header parsers/verifier, the generic :hmac scheme, the canonicalizer and the replay oracle (FUZZ_TIME s each)"
  task :fuzz do
    # bin/setup installs clang-14 and libclang-rt-14-dev; a missing fuzzer is a failure, not a skip.
    abort "verify:fuzz: clang-14 not found (run bin/setup)" unless system("command -v clang-14 >/dev/null 2>&1")
    sh "make", "-s", "-C", "#{dir}/fuzz", "run", "FUZZ_TIME=#{fuzz_time}"
  end
end

desc "Rewrite the provider table of docs/providers.md from the provider entries (ext/webhook_inbox/providers.c)"
task "verify:readme" => :compile do
  $LOAD_PATH.unshift File.expand_path("../lib", __dir__)
  require "webhook_inbox"
  guide = File.expand_path("../docs/providers.md", __dir__)
  File.write(guide, WebhookInbox::ProviderTable.splice(File.read(guide)))
end

task c_tests: ["verify:ctest", "verify:asan", "verify:fuzz"]
