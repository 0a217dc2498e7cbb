# frozen_string_literal: true

# rake webhook_inbox:requeue_effects - quarantined outbox effects (and Ruby handler runs)
# back to pending, through the dashboard's EffectList, so a requeue from rake is filtered
# and audited exactly as one from the dashboard (webhook_inbox_actions, action requeue,
# filter {"effects": {...}}, with ACTOR=, default $USER@host as the other tasks'):
#   bin/rails webhook_inbox:requeue_effects OPERATION_ID=receipt:pi_1
#   bin/rails webhook_inbox:requeue_effects DESTINATION=receipts [FROM=2026-01-31T00:00 TO=...] [ERROR=timeout]
#   bin/rails webhook_inbox:requeue_effects HANDLER=SendReceiptHandler      (Ruby handler runs)
#   bin/rails webhook_inbox:requeue_effects EVENT=scope/event_id | SCOPE=... EVENT_ID=...
#   bin/rails webhook_inbox:requeue_effects ALL=1                           (every quarantined effect)
# Loaded by WebhookInbox::Engine (the task uses its app/models).
namespace :webhook_inbox do
  desc "Move quarantined effects back to pending: OPERATION_ID=, DESTINATION=, HANDLER=, EVENT=scope/id, SCOPE=, " \
       "EVENT_ID=, FROM=, TO=, ERROR= or ALL=1 (ACTOR= for the audit)"
  task requeue_effects: :environment do
    require "socket"
    params = { "operation_id" => ENV["OPERATION_ID"], "destination" => ENV["DESTINATION"], "handler" => ENV["HANDLER"],
               "scope" => ENV["SCOPE"], "event_id" => ENV["EVENT_ID"], "from" => ENV["FROM"], "to" => ENV["TO"],
               "error" => ENV["ERROR"] }
    if (event = ENV["EVENT"].to_s).include?("/")
      params["scope"], params["event_id"] = event.split("/", 2) # a scope holds no '/'; an event id may
    elsif !event.empty?
      abort "webhook_inbox:requeue_effects: EVENT= is scope/event_id"
    end
    begin
      list = WebhookInbox::EffectList.new(params.compact)
    rescue WebhookInbox::EventList::BadFilter => e
      abort "webhook_inbox:requeue_effects: #{e.message}"
    end
    actor = ENV["ACTOR"].to_s.empty? ? "#{ENV['USER'].to_s.empty? ? 'unknown' : ENV['USER']}@#{Socket.gethostname}" : ENV["ACTOR"]
    moved, id = ActiveRecord::Base.connection_pool.with_connection do |c|
      if list.to_requeue_filter.empty? && !ENV["ALL"]
        abort "webhook_inbox:requeue_effects needs OPERATION_ID=, DESTINATION=, HANDLER=, EVENT=, SCOPE=, EVENT_ID=, " \
              "FROM=, TO=, ERROR= or ALL=1"
      end
      list.requeue!(c, actor[0, 200])
    end
    puts "requeued #{moved} effect#{'s' unless moved == 1} (action ##{id})"
  end
end
