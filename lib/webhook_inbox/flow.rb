# frozen_string_literal: true

require_relative "instrumentation"

module WebhookInbox
  # Flow - pause, resume and rate limits (db/015_pause.sql) through an ActiveRecord
  # connection: what rake webhook_inbox:pause/resume and the dashboard call. A route is an
  # event type pattern (exact, "prefix*", "*"), a scope a source_scope, a destination an
  # outbox destination or "ruby" (the Ruby handlers' runs). Each change is an action in
  # webhook_inbox_actions and publishes pause.webhook_inbox / resume.webhook_inbox (a refused
  # one: with ActiveSupport's exception keys); a target the database refuses raises
  # ActiveRecord::StatementInvalid.
  #   WebhookInbox::Flow.pause(conn, "route", "invoice.*", actor: "ops@example.com")
  #   WebhookInbox::Flow.resume(conn, "route", "invoice.*", rate: 50, actor: "ops@example.com")
  module Flow
    KINDS = %w[route scope destination].freeze
    PAUSE_SQL = "SELECT held, action_id FROM webhook_inbox_pause($1, $2, $3)"
    RESUME_SQL = "SELECT released, action_id FROM webhook_inbox_resume($1, $2, $3::float8, $4)"
    RULES_SQL = "SELECT kind, target, paused, rate, pending, changed_at, changed_by FROM webhook_inbox_flow_stats()"

    module_function

    # Returns { held:, action_id: }: the pending events (effects) it holds now.
    def pause(connection, kind, target, actor:)
      Instrumentation.instrument("pause.webhook_inbox", ->(r) { r.merge(kind: kind.to_s, target: target.to_s, actor: actor.to_s) }) do
        row = connection.select_all(PAUSE_SQL, "webhook_inbox pause", [kind.to_s, target.to_s, actor.to_s]).first
        { held: Integer(row["held"]), action_id: Integer(row["action_id"]) }
      end
    end

    # rate: events/s over all sidecars (nil: unlimited). Returns { released:, action_id: }.
    def resume(connection, kind, target, actor:, rate: nil)
      payload = ->(r) { r.merge(kind: kind.to_s, target: target.to_s, rate: rate&.to_f, actor: actor.to_s) }
      Instrumentation.instrument("resume.webhook_inbox", payload) do
        row = connection.select_all(RESUME_SQL, "webhook_inbox resume", [kind.to_s, target.to_s, rate&.to_s, actor.to_s]).first
        { released: Integer(row["released"]), action_id: Integer(row["action_id"]) }
      end
    end

    # The rules, each { kind:, target:, paused:, rate:, pending:, changed_at:, changed_by: }.
    def rules(connection)
      connection.select_all(RULES_SQL, "webhook_inbox flow").map do |r|
        { kind: r["kind"], target: r["target"], paused: [true, "t"].include?(r["paused"]),
          rate: r["rate"]&.to_f, pending: Integer(r["pending"]), changed_at: r["changed_at"], changed_by: r["changed_by"] }
      end
    end

    # The first line of a refusal from the database, for a message (never a payload: the
    # functions name only the kind and the rule).
    def refusal(error)
      error.cause&.message.to_s.lines.first.to_s.sub(/\AERROR:\s*/, "").sub(/\Awebhook_inbox: /, "").strip
    end
  end
end
