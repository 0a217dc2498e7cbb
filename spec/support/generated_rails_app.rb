# frozen_string_literal: true

require "open3"
require "json"
require "bundler"
require "fileutils"
require "tmpdir"
require_relative "receiver_helpers"

# GeneratedRailsApp - a freshly generated Rails 7.2 app (rails new --api --database=postgresql)
# with the gem built and installed as a user gets it (gem build + gem install: the C extension
# and the sidecar compiled by RubyGems; once per run, each app with its own copy) and the app's
# Gemfile naming it exactly as the README does, on a throwaway PostgreSQL. The database comes
# from config/database.yml and libpq's PG* variables: DATABASE_URL is never set. Include it in
# an example group and call create_generated_app in before(:all) (one app for the group:
# generating takes a minute), remove_generated_app in after(:all).
module GeneratedRailsApp
  def create_generated_app(name = "shop")
    root = ReceiverHelpers::ROOT
    @pg = ThrowawayPostgres.new
    @work = Dir.mktmpdir("wi-rails-app-")
    @gems = File.join(@work, "gems")
    @app = File.join(@work, name)
    @env = { "PGHOST" => @pg.socket_dir, "PGPORT" => @pg.port.to_s, "PGUSER" => @pg.url[/user=(\S+)/, 1],
             "GEM_HOME" => @gems, "GEM_PATH" => [@gems, *Gem.path].join(":"), "DATABASE_URL" => nil,
             "BUNDLE_GEMFILE" => nil, "RUBYOPT" => nil, "RUBYLIB" => nil, "DISABLE_DATABASE_ENVIRONMENT_CHECK" => "1" }
    install_gem(root)
    generate_app(root)
  end

  def remove_generated_app
    @pg&.destroy
    FileUtils.rm_rf(@work) if @work
  end

  def sh(*cmd, env: {}, ok: true)
    out, status = Bundler.with_unbundled_env { Open3.capture2e(@env.merge(env), *cmd, chdir: @app) }
    expect(status.success?).to eq(ok), "#{cmd.join(' ')} exited #{status.exitstatus}:\n#{out}"
    out
  end

  def write(path, text)
    full = File.join(@app, path)
    FileUtils.mkdir_p(File.dirname(full))
    File.write(full, text)
  end

  def psql(sql, db: "#{File.basename(@app)}_development")
    @pg.psql(sql, db: db).strip
  end

  # Starts bin/webhook-inbox-sidecar ARGS (run, ruby, ...) in the app, in a process group of
  # its own, appending its output to log; returns its pid. Every one started (also by an
  # example: @spawned is the group's array, shared) is stopped by stop_app_processes.
  def start_app_process(*args, log:) = start_app_command("bin/webhook-inbox-sidecar", *args, log: log)

  # Starts any command in the app the same way (a Procfile line, `bin/rails server`).
  def start_app_command(*command, log:)
    Bundler.with_unbundled_env do
      Process.spawn(@env, *command, chdir: @app, out: [log, "a"], err: [log, "a"], pgroup: true)
    end.tap { |pid| @spawned << pid }
  end

  # `rails new --minimal` leaves ActiveJob and ActionMailer out; a stock app has them.
  def enable_jobs_and_mailers
    application = File.read(File.join(@app, "config/application.rb"))
    write("config/application.rb", application.gsub(%r{^# (require "(active_job|action_mailer)/railtie")}, '\1'))
  end

  def stop_app_processes
    (@spawned || []).each do |pid|
      (Process.kill("TERM", -pid) rescue nil) # rubocop:disable Style/RescueModifier
      (Process.wait(pid) rescue nil) # rubocop:disable Style/RescueModifier
    end
  end

  # Waits up to timeout seconds for the block to be true; else fails with the tails of
  # @worker_log and @sidecar_log.
  def wait_for(what, timeout: 60, &cond)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    sleep 0.1 until (cond.call rescue false) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline # rubocop:disable Style/RescueModifier
    logs = { "worker" => [@worker_log, 30], "sidecar" => [@sidecar_log, 15] }.filter_map do |name, (path, n)|
      "#{name}:\n#{File.read(path).lines.last(n).join}" if path && File.exist?(path)
    end
    expect(cond.call).to be_truthy, [what, *logs].join("\n")
  end

  private

  # Each app gets its own copy of the gem as installed once for the run (GeneratedRailsApp.installed_gems).
  def install_gem(root)
    gems, @gem_install_seconds, @gem_install_reused = GeneratedRailsApp.installed_gems(root)
    FileUtils.cp_r(gems, @gems, preserve: true)
  end

  # The gem built and installed (which compiles the extension and the sidecar, ~20 s) once per
  # rspec run, since the tree does not change during it: the first app pays for it, later ones
  # copy the installed directory. Returns [its directory, the seconds it took, whether it was
  # made before this call]. A failed build raises, and the next app tries again.
  def self.installed_gems(root)
    return [*@installed_gems, true] if @installed_gems

    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    work = Dir.mktmpdir("wi-gem-")
    gems = File.join(work, "gems")
    out, st = Bundler.with_unbundled_env { Open3.capture2e("gem", "build", "webhook_inbox.gemspec", "-o", File.join(work, "wi.gem"), chdir: root) }
    raise "gem build failed: #{out}" unless st.success?

    out, st = Bundler.with_unbundled_env do
      Open3.capture2e("gem", "install", "--local", "--ignore-dependencies", "--no-document", "--install-dir", gems, File.join(work, "wi.gem"))
    end
    raise "gem install failed: #{out}" unless st.success?

    @installed_gems = [gems, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
    [*@installed_gems, false]
  end

  def generate_app(root)
    out, st = Bundler.with_unbundled_env do
      Open3.capture2e({ "BUNDLE_GEMFILE" => File.join(root, "Gemfile") }, "bundle", "exec", "rails", "new", @app, "--api", "--minimal",
                      "--database=postgresql", "--skip-bundle", "--skip-git", chdir: @work)
    end
    raise "rails new failed: #{out}" unless st.success?

    gemfile = File.read(File.join(@app, "Gemfile")).lines.reject { |l| l =~ /gem "(debug|brakeman|rubocop-rails-omakase|bootsnap)"/ }
    File.write(File.join(@app, "Gemfile"), gemfile.join + %(gem "webhook_inbox_pg"\n))
    # The newest Rails 7.2 app boots bootsnap when present; it was removed from the Gemfile.
    boot = File.join(@app, "config/boot.rb")
    File.write(boot, File.read(boot).sub(/^require "bootsnap\/setup".*$/, ""))
    sh("bundle", "install", "--local")
  end
end
