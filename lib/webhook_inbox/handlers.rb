# frozen_string_literal: true

require_relative "errors"
require_relative "handlers/registry"
require_relative "handlers/event"
require_relative "handlers/savepoint"
require_relative "handlers/time_limit"
require_relative "handlers/runner"

module WebhookInbox
  # Raised by a Ruby handler to fail its event for good: the handler's writes roll back, its
  # run and the event are quarantined with the message (requeue the event to run it again).
  class Permanent < Error; end

  # Handlers - Ruby handlers, subscribed in app code (db/009_ruby_handlers.sql has the
  # database's half):
  #
  #   WebhookInbox.subscribe("payment_intent.succeeded", as: :mark_paid) { |event| ... }
  #
  #   class PaymentSucceededHandler < WebhookInbox::Handler   # app/webhooks/payment_succeeded_handler.rb
  #     subscribe "payment_intent.succeeded"
  #     def call(event) = ...
  #   end
  #
  # The Ruby worker (`bin/webhook-inbox-sidecar ruby`, Handlers::Worker) registers them in the
  # database when it starts; from then on the sidecar hands each event of a matching type to
  # it after the type's SQL route, and the event is done once every handler has run.
  module Handlers
    APP_DIR = "app/webhooks"
    REGISTER_SQL = "SELECT webhook_inbox_ruby_register($1::jsonb)"

    module_function

    def registry = @registry ||= Registry.new

    # Loads the handler classes under app/webhooks (they subscribe when loaded; Rails
    # autoloads them lazily otherwise). Nothing outside Rails.
    def load_app_handlers
      return unless defined?(::Rails) && ::Rails.respond_to?(:root) && ::Rails.root

      dir = ::Rails.root.join(APP_DIR)
      return unless dir.directory?

      loader = ::Rails.autoloaders.main
      loader.respond_to?(:eager_load_dir) ? loader.eager_load_dir(dir.to_s) : Dir[dir.join("**/*.rb")].sort.each { |f| require f }
    end

    # Adds the registry's (pattern, handler) pairs to webhook_inbox_ruby_handlers (in the
    # caller's transaction, if any); never removes one: workers of an older release, or one
    # that loaded nothing, must not take a newer handler's events away from it (retire a
    # handler with rake webhook_inbox:retire_handler). An empty registry raises Error.
    # Returns the number registered.
    def register(connection, reg = registry)
      raise Error, "webhook_inbox: no Ruby handlers to register (WebhookInbox.subscribe or app/webhooks/)" if reg.empty?

      Integer(connection.select_value(REGISTER_SQL, "webhook_inbox ruby register", [JSON.generate(reg.pairs)]))
    end

    RETIRE_SQL = "SELECT * FROM webhook_inbox_ruby_retire($1, $2, $3)"

    # Retires a handler by name (every pattern, or only event_type): see webhook_inbox_ruby_retire.
    # Returns { removed:, runs_retired:, action_id: }; an unregistered name raises ActiveRecord's error.
    def retire(connection, name, actor:, event_type: nil)
      row = connection.select_all(RETIRE_SQL, "webhook_inbox ruby retire", [name.to_s, event_type, actor.to_s]).first
      { removed: Integer(row["removed"]), runs_retired: Integer(row["runs_retired"]), action_id: Integer(row["action_id"]) }
    end
  end

  # The base class of handler classes (app/webhooks/*_handler.rb): `subscribe` the event
  # types in the body, define #call(event). A new instance runs each event.
  class Handler
    # Subscribes this class, by its name (or as:), to event types: exact, "prefix.*", "*".
    def self.subscribe(*patterns, as: nil)
      raise ArgumentError, "webhook_inbox: an anonymous class cannot subscribe (its name keeps it once per event)" unless name

      old = Handlers.registry[as || name]
      patterns = old.patterns | patterns.map(&:to_s) if old && old.target == name
      Handlers.registry.add(patterns, name, name: as || name)
    end

    def self.call(event) = new.call(event)

    def call(_event)
      raise NotImplementedError, "#{self.class.name}#call(event) is not written yet"
    end
  end

  # Subscribes a block (or an object answering #call(event)) to event types. Name it with as:
  # when more than one block subscribes to the same types; the default name is the types.
  #   WebhookInbox.subscribe("payment_intent.succeeded", as: :send_receipt) { |event| ... }
  def self.subscribe(*patterns, as: nil, &block)
    callable = patterns.last.respond_to?(:call) && !patterns.last.is_a?(String) ? patterns.pop : block
    raise ArgumentError, "webhook_inbox: subscribe needs a block or an object answering #call(event)" unless callable

    Handlers.registry.add(patterns, callable, name: as || patterns.join(","))
  end
end
