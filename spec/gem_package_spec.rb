# frozen_string_literal: true

require_relative "spec_helper"
require "open3"
require "bundler"
require "rubygems/package"
require "tmpdir"

# The gem as users get it: `gem build` packs each file once and only what users need (tracked
# files, every sidecar source in its room, no tests, benchmarks, fuzz corpora or tools), with
# bounded dependencies and no warnings; `gem install --local` into an empty GEM_HOME compiles
# the extension and the sidecar, and leaves one copy of the sidecar's binary, which runs from
# the gem's executable; `require "webhook_inbox"` loads the library from there.
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
    expect(packed.grep(%r{\A(spec|bench|bin|tmp|\.ci)/|/fuzz/|/test/|/tools/|corpus|\.(o|so)\z|\A(?!exe/).*webhook-inbox-sidecar\z}))
      .to eq([])
    expect(packed).to include("lib/webhook_inbox.rb", "ext/webhook_inbox/extconf.rb", "sidecar/extconf.rb",
                              "db/001_inbox.sql", "exe/webhook-inbox-sidecar", "README.md", "docs/providers.md",
                              "docs/architecture.md")
    expect(packed).to include("lib/webhook_inbox/monitoring/alerts.yml", "lib/webhook_inbox/monitoring/dashboard.json")
    expect(@build_output).not_to match(/open-ended dependency/i)
  end

  it "packs only tracked files, and every sidecar source of every room" do
    tracked, st = Open3.capture2("git", "-C", root, "ls-files", "-z")
    skip "not a git checkout" unless st.success?

    tracked = tracked.split("\0")
    expect(packed - tracked).to eq([]) # no build products or stray local files
    sources = tracked.grep(%r{\Asidecar/src/.+\.[ch]\z})
    expect(sources.grep(%r{\Asidecar/src/[^/]+/})).not_to be_empty
    expect(sources - packed).to eq([])
  end

  it "builds without warnings" do
    # RubyGems warns about a missing homepage until the published repository's URL is known:
    # set spec.homepage in webhook_inbox.gemspec and drop this one exception.
    warnings = @build_output.lines.grep(/\AWARNING:/).map(&:strip)
    expect(warnings - ["WARNING:  no homepage specified",
                       "WARNING:  See https://guides.rubygems.org/specification-reference/ for help"]).to eq([])
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
    # A plain require, as a script would: RubyGems finds the library in the installed gem.
    out, st = Bundler.with_unbundled_env do
      Open3.capture2e(@env, RbConfig.ruby, "-e", 'require "webhook_inbox"; print $LOADED_FEATURES.grep(%r{/webhook_inbox\.rb\z}).first')
    end
    expect(st.success?).to be(true), out
    expect(out).to start_with(@home)
  end
end
