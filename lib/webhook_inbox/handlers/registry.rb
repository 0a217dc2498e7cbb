# frozen_string_literal: true

module WebhookInbox
  module Handlers
    # Registry - the app's Ruby handlers: name -> (patterns, callable). A name is part of each
    # run's operation id (the once-marker of one event and one handler), so it must not change
    # between deploys: a handler class is named by its class name, a block by subscribe's as:
    # (default: its pattern, for the first block on that pattern). Patterns: an exact type, a
    # prefix ending in "*" ("payment_intent.*"), or "*"; every handler whose pattern matches an
    # event's type runs once for it.
    class Registry
      NAME = /\A[!-~]{1,120}\z/ # printable ASCII, no spaces (as the table's check)
      Subscription = Struct.new(:name, :patterns, :target, keyword_init: true) do
        # The callable: a class is looked up by name at each run (a reloaded class replaces it).
        def callable
          target.is_a?(String) ? Object.const_get(target) : target
        end
      end

      def initialize
        @subscriptions = {}
        @lock = Mutex.new
      end

      # Registers target (a block, an object answering #call(event), or a handler class' name)
      # for patterns under name. The same name again is refused unless it is the same class
      # (Rails reloading it). Returns the Subscription.
      def add(patterns, target, name:)
        patterns = Array(patterns).map { |p| check_pattern(p) }
        raise ArgumentError, "webhook_inbox: subscribe needs at least one event type" if patterns.empty?

        name = name.to_s
        unless name.match?(NAME)
          raise ArgumentError, "webhook_inbox: handler name #{name.inspect} must be 1-120 printable ASCII characters without spaces"
        end

        @lock.synchronize do
          old = @subscriptions[name]
          if old && !(old.target.is_a?(String) && old.target == target)
            raise ArgumentError, "webhook_inbox: a handler named #{name.inspect} is already subscribed; give this one " \
                                 "another name (subscribe(..., as: :send_receipt)): the name keeps each handler once per event"
          end
          @subscriptions[name] = Subscription.new(name: name, patterns: patterns.uniq.freeze, target: target)
        end
      end

      def [](name) = @lock.synchronize { @subscriptions[name.to_s] }
      def subscriptions = @lock.synchronize { @subscriptions.values }
      def empty? = @lock.synchronize { @subscriptions.empty? }

      # The names of the handlers for an event type (what the database matches the same way).
      def names_for(event_type)
        subscriptions.select { |s| s.patterns.any? { |p| Registry.match?(p, event_type) } }.map(&:name).sort
      end

      # [[pattern, name], ...]: the rows the worker registers.
      def pairs = subscriptions.flat_map { |s| s.patterns.map { |p| [p, s.name] } }.sort

      def clear = @lock.synchronize { @subscriptions.clear }

      def self.match?(pattern, type)
        pattern.end_with?("*") ? type.start_with?(pattern.chomp("*")) : pattern == type
      end

      private

      def check_pattern(pattern)
        p = pattern.to_s
        if p.empty? || p.bytesize > 255 || p.chomp("*").include?("*")
          raise ArgumentError, "webhook_inbox: #{pattern.inspect} is not an event type: give an exact type, a prefix " \
                               "ending in * (\"payment_intent.*\") or \"*\" (at most 255 bytes)"
        end
        p
      end
    end
  end
end
