# frozen_string_literal: true

require_relative "spec_helper"
require "open3"
require "bundler"
require "rubygems/package"
require "tmpdir"

# The gem as users get it: `gem build` packs each file once and only what users need, with
# bounded dependencies; `gem install --local` into an empty GEM_HOME compiles the extension
# and the sidecar, and leaves one copy of the sidecar's binary, which runs from the gem's
# executable; the library loads from there.
RSpec.describe "the built gem" do
  root = TestDatabase::ROOT

  before(:all) do
    @work = Dir.mktmpdir("wi-gem-")
    @gem = File.join(@work, "wi.gem")
    out, st = Bundler.with_unbundled_env { Open3.capture2e("gem", "build", "webhook_inbox.gemspec", "-o", @gem, chdir: root) }
    raise "gem build failed:\n#{out}" unless st.success?

    @build_output = out
    @home = File.join(@work, "home")
    @env = { "GEM_HOME" => @home, "GEM_PATH" => [@home, *Gem.path].join(":"), "BUNDLE_GEMFILE" => nil, "RUBYOPT" => nil,
             "RUBYLIB" => nil }
    out, st = Bundler.with_unbundled_env do
      Open3.capture2e(@env, "gem", "install", "--local", "--ignore-dependencies", "--no-document", "--install-dir", @home, @gem)
    end
    raise "gem install failed:\n#{out}" unless st.success?
  end

  after(:all) { FileUtils.rm_rf(@work) if @work }

  let(:packed) { Gem::Package.new(@gem).contents }

  it "packs each file once, and no specs, benchmarks, fuzz targets or build products" do
    expect(packed.size).to eq(packed.uniq.size)
    expect(packed.grep(%r{\A(spec|bench|bin|tmp|\.ci)/|/fuzz/|/test/|\.(o|so)\z|\A(?!exe/).*webhook-inbox-sidecar\z})).to eq([])
    expect(packed).to include("lib/webhook_inbox.rb", "ext/webhook_inbox/extconf.rb", "sidecar/extconf.rb",
                              "db/001_inbox.sql", "exe/webhook-inbox-sidecar", "README.md", "docs/providers.md")
    expect(packed).to include("lib/webhook_inbox/monitoring/alerts.yml", "lib/webhook_inbox/monitoring/dashboard.json")
    expect(@build_output).not_to match(/open-ended dependency/i)
  end

  it "bounds every runtime dependency from above" do
    spec = Gem::Package.new(@gem).spec
    spec.runtime_dependencies.each do |dep|
      expect(dep.requirement.requirements.map(&:first)).to include("<").or include("~>")
    end
  end

  it "installs one copy of the sidecar, which runs from the gem's executable, and loads the library" do
    binaries = Dir.glob(File.join(@home, "**", "webhook-inbox-sidecar")).select { |f| File.size(f) > 100_000 }
    expect(binaries.size).to eq(1), binaries.inspect
    out, st = Bundler.with_unbundled_env { Open3.capture2e(@env, File.join(@home, "bin", "webhook-inbox-sidecar"), "--help") }
    expect(st.success?).to be(true), out
    expect(out).to include("usage: webhook-inbox-sidecar COMMAND")
    out, st = Bundler.with_unbundled_env do
      Open3.capture2e(@env, RbConfig.ruby, "-e", 'gem "webhook_inbox_pg"; require "webhook_inbox"; ' \
                                                 'print WebhookInbox::Sidecar.binary, "|", WebhookInbox::Verifier.new(:stripe, secrets: ["whsec_x"]).scheme')
    end
    expect(st.success?).to be(true), out
    expect(out).to eq("#{binaries.first}|stripe")
  end
end
