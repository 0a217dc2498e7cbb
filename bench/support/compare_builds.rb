# frozen_string_literal: true

require "json"
require "open3"
require "tmpdir"

# CompareBuilds - runs one bench against this tree's build and an older one, alternated
# (this, older, this, older, ...), so both see the same drift of a shared machine, and
# prints each run's figures, the medians and the ratio this/older. The older build is a
# built tree (a directory with lib/webhook_inbox/webhook-inbox-sidecar) or a git ref, which
# is checked out in a temporary worktree, compiled there (bundle exec rake compile) and
# removed at the end. The bench is run as `ruby BENCH ARGS --build DIR` and must print a
# JSON object as its last line; fields names the numbers to show ("a.b": field b of object a).
class CompareBuilds
  Build = Struct.new(:label, :dir)

  def initialize(root:, bench:, args:, older:, rounds:, fields:, out: $stdout)
    raise ArgumentError, "--rounds must be at least 2" unless rounds >= 2

    @root = root
    @bench = bench
    @args = args
    @older = older
    @rounds = rounds
    @fields = fields
    @out = out
  end

  # Runs the rounds; returns {label => [JSON of each run]}. Raises RuntimeError when a build
  # or a run fails (its output in the message).
  def run
    self.class.with_build(@root, @older, out: @out) do |older|
      builds = [Build.new("this (#{self.class.describe(@root)})", @root), older]
      @out.puts "#{File.basename(@bench)} compare: #{builds.map(&:label).join(' vs ')}, alternated, #{@rounds} rounds"
      runs = builds.to_h { |b| [b.label, []] }
      @rounds.times do |i|
        builds.each do |b|
          res = run_once(b)
          runs[b.label] << res
          @out.puts format("  round %d  %-34s %s", i + 1, b.label, @fields.map { |f| "#{f} #{value(res, f)}" }.join("  "))
        end
      end
      summarize(builds, runs)
      runs
    end
  end

  private

  def summarize(builds, runs)
    @fields.each do |f|
      meds = builds.map { |b| median(runs[b.label].map { |r| value(r, f) }) }
      pairs = runs[builds[0].label].zip(runs[builds[1].label]).map { |a, b| ratio(value(a, f), value(b, f)) }
      @out.puts format("  %-20s median this %s, older %s: this/older %s (pair by pair %s)", f, fmt(meds[0]), fmt(meds[1]),
                       ratio(meds[0], meds[1]), pairs.join(", "))
    end
  end

  def value(result, field)
    Float(result.dig(*field.split(".")) || raise(KeyError, "the bench printed no #{field}"))
  end

  def median(values)
    s = values.sort
    s.size.odd? ? s[s.size / 2] : (s[s.size / 2 - 1] + s[s.size / 2]) / 2.0
  end

  def ratio(a, b) = b.positive? ? format("%.2f", a / b) : "n/a"
  def fmt(v) = v.round(v.abs < 10 ? 3 : 0).to_s

  def run_once(build)
    cmd = [RbConfig.ruby, @bench, *@args, "--build", build.dir]
    out, err, status = Open3.capture3(*cmd)
    raise "#{build.label}: #{cmd.join(' ')} failed (#{status}):\n#{err}#{out}" unless status.success?

    JSON.parse(out.lines.last.to_s)
  rescue JSON::ParserError
    raise "#{build.label}: the bench's last line is not JSON:\n#{out}"
  end

  # A tree's commit, "+changes" when it has uncommitted ones.
  def self.describe(dir)
    sha, = Open3.capture2("git", "-C", dir, "rev-parse", "--short", "HEAD")
    dirty, = Open3.capture2("git", "-C", dir, "status", "--porcelain", "--untracked-files=no")
    "#{sha.strip.empty? ? dir : sha.strip}#{dirty.strip.empty? ? '' : '+changes'}"
  end

  # Yields the Build of older: a built tree as it is; a git ref of root built in a temporary
  # worktree, removed after. Raises RuntimeError when it is neither or does not build.
  def self.with_build(root, older, out: $stdout)
    if File.executable?(File.join(older, "lib/webhook_inbox/webhook-inbox-sidecar"))
      return yield Build.new("older (#{describe(older)})", File.expand_path(older))
    end

    sha, err, st = Open3.capture3("git", "-C", root, "rev-parse", "--verify", "--quiet", "#{older}^{commit}")
    raise "#{older} is neither a built tree nor a commit of #{root}: #{err}" unless st.success?

    Dir.mktmpdir("wi-compare-") do |tmp|
      dir = File.join(tmp, "tree")
      sh("git", "-C", root, "worktree", "add", "--detach", dir, sha.strip)
      begin
        out.puts "building #{older} (#{sha.strip[0, 12]}) in #{dir}"
        sh({ "BUNDLE_GEMFILE" => File.join(dir, "Gemfile") }, "bundle", "exec", "rake", "compile", chdir: dir)
        yield Build.new("older (#{older} #{sha.strip[0, 7]})", dir)
      ensure
        system("git", "-C", root, "worktree", "remove", "--force", dir, out: File::NULL, err: File::NULL)
      end
    end
  end

  def self.sh(*cmd, **opts)
    out, status = Open3.capture2e(*cmd, **opts)
    raise "#{cmd.grep(String).join(' ')} failed:\n#{out}" unless status.success?
  end
  private_class_method :sh
end
