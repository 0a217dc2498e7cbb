# frozen_string_literal: true

# The smallest Rails app that runs the peers the way a Rails 7.2 app would: ActiveRecord
# models, ActiveJob jobs, a controller (bench/peers/drain's web request), GoodJob or Solid Queue as the adapter (PEERS_QUEUE=good_job |
# solid_queue; the worker processes are started with it), and webhook_inbox's Ruby handlers
# (app/webhooks). Production settings unless RAILS_ENV says otherwise: eager loading, cached
# classes, logs at warn (a tuned app does not log every job at info).
ENV["RAILS_ENV"] ||= "production"
ENV["BUNDLE_GEMFILE"] ||= File.expand_path("../Gemfile", __dir__)
require "bundler/setup"
require "rails"
require "active_record/railtie"
require "active_job/railtie"
require "action_controller/railtie"
require "good_job"
require "solid_queue"
require "webhook_inbox"

module Peers
  class Application < Rails::Application
    config.load_defaults 7.2
    config.root = File.expand_path("..", __dir__)
    config.eager_load = Rails.env.production?
    config.cache_classes = Rails.env.production?
    config.secret_key_base = "bench-peers-" + ("0" * 64)
    config.logger = ActiveSupport::Logger.new($stderr)
    config.log_level = ENV.fetch("PEERS_LOG_LEVEL", "warn").to_sym
    config.active_record.dump_schema_after_migration = false
    config.active_job.queue_adapter = ENV.fetch("PEERS_QUEUE", "good_job").to_sym
    # GoodJob runs in its own processes (`good_job start`), never inside the enqueuing one.
    config.good_job.execution_mode = :external
    config.good_job.max_threads = Integer(ENV.fetch("PEERS_THREADS", "5"))
    config.good_job.poll_interval = 1
    config.good_job.enable_cron = false
    config.good_job.preserve_job_records = true # GoodJob's default: a finished job stays until cleaned up
    config.solid_queue.silence_polling = true
  end
end
