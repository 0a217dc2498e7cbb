# frozen_string_literal: true

# store.rake - C unit tests of the store core (no server needed), plain and under
# ASan/UBSan, hooked into :c_tests. The store's behaviour against PostgreSQL is in the specs.
namespace :store do
  dir = File.expand_path("../ext/webhook_inbox/test", __dir__)

  desc "Store core C unit tests (ext/webhook_inbox/test/test_store.c)"
  task :ctest do
    sh "make", "-s", "-C", dir, "-f", "store.mk", "test"
  end

  desc "Store core C unit tests under -fsanitize=address,undefined"
  task :asan do
    sh "make", "-s", "-C", dir, "-f", "store.mk", "asan"
  end
end

task c_tests: ["store:ctest", "store:asan"]
