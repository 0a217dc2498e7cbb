# frozen_string_literal: true

require_relative "../spec_helper"
require "open3"
require "fileutils"
require "bundler"

# A `path:` gem or a fresh clone is not compiled by Bundler: requiring it must say how to
# build it, not fail with a bare LoadError. Same for the sidecar's launcher.
RSpec.describe "loading an uncompiled checkout" do
  root = TestDatabase::ROOT

  it "explains how to build the extension and the sidecar" do
    Dir.mktmpdir("wi-uncompiled-") do |dir|
      FileUtils.cp_r(File.join(root, "lib"), dir)
      FileUtils.cp_r(File.join(root, "exe"), dir)
      FileUtils.rm_f(Dir[File.join(dir, "lib/webhook_inbox/*.so")] + [File.join(dir, "lib/webhook_inbox/webhook-inbox-sidecar")])
      out, status = Open3.capture2e({ "RUBYLIB" => nil, "WEBHOOK_INBOX_SIDECAR" => nil }, RbConfig.ruby, "-I", File.join(dir, "lib"),
                                    "-e", 'begin; require "webhook_inbox"; rescue LoadError => e; puts e.message; exit 3; end')
      expect(status.exitstatus).to eq(3)
      expect(out).to include("native extension is not built", "bundle exec rake compile", "libpq-dev")

      out, status = Bundler.with_unbundled_env do
        Open3.capture2e({ "WEBHOOK_INBOX_SIDECAR" => nil }, RbConfig.ruby, File.join(dir, "exe/webhook-inbox-sidecar"), "stats")
      end
      expect(status).not_to be_success
      expect(out).to include("native binary is not built", "bundle exec rake compile")
    end
  end
end
