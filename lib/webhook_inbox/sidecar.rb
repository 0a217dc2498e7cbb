# frozen_string_literal: true

module WebhookInbox
  # Sidecar - finds and starts the native webhook-inbox-sidecar binary built with the gem
  # (exe/webhook-inbox-sidecar, the Rails binstub and the rake tasks all go through here).
  #
  #   WebhookInbox::Sidecar.exec("run", "--concurrency", "2", database_url: "host=/run/pg dbname=app")
  #
  # The database reaches the binary in the DATABASE_URL environment variable, never in argv
  # (argv is visible to every user in `ps`).
  module Sidecar
    NAME = "webhook_inbox/webhook-inbox-sidecar"
    GEM_NAME = "webhook_inbox_pg"
    ROOT = File.expand_path("../..", __dir__)

    module_function

    # The binary's path; raises LoadError, saying how to build it, when it is missing.
    def binary
      candidates.find { |path| File.file?(path) && File.executable?(path) } or raise LoadError, <<~MSG.chomp
        webhook-inbox-sidecar: the native binary is not built.
          From a `path:` checkout or a clone (Bundler does not compile path gems): run
            bundle exec rake compile   # in #{ROOT}
          Installed as a gem: reinstall it (`gem pristine #{GEM_NAME}`); its build needs a C compiler and the
          libpq, OpenSSL and libcurl headers (Debian: apt-get install build-essential pkg-config libpq-dev
          libssl-dev libcurl4-openssl-dev; macOS: brew install pkg-config libpq openssl curl).
      MSG
    end

    # Replaces this process with the sidecar. database_url: nil keeps the environment's.
    # `ruby` is not the binary's: it runs the app's Ruby handlers in this (booted) process
    # (Handlers::Worker) and exits with its status.
    def exec(*args, database_url: nil)
      if args.first.to_s == "ruby"
        require_relative "handlers/worker"
        Kernel.exit(Handlers::Worker.cli(args.drop(1).map(&:to_s)))
      end
      env = database_url ? { "DATABASE_URL" => database_url.to_s } : {}
      Kernel.exec(env, binary, *args.map(&:to_s))
    end

    def candidates
      list = [ENV["WEBHOOK_INBOX_SIDECAR"], File.join(ROOT, "lib", NAME)]
      list.concat($LOAD_PATH.map { |dir| File.join(dir, NAME) })
      if defined?(Gem::Specification)
        begin
          spec = Gem::Specification.find_by_name(GEM_NAME)
          list << File.join(spec.extension_dir, NAME) << File.join(spec.full_gem_path, "lib", NAME)
        rescue Gem::MissingSpecError
          nil
        end
      end
      list.compact
    end
  end
end
