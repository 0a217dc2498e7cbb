# frozen_string_literal: true

module WebhookInbox
  # Pause and resume (db/015_pause.sql): the rules with their pending events or effects, a
  # form to pause a route (event type pattern), a scope or a destination, and per rule a
  # resume, optionally at a rate (events/s over all sidecars). Each POST (CSRF-checked) goes
  # through WebhookInbox::Flow and is recorded with the dashboard's actor; a target or rate the
  # database refuses is 422 with its reason, never 500.
  class FlowController < ApplicationController
    # The functions' refusals (22023), a rate that is not a number (22P02), a CHECK (23514).
    rescue_from(::ActiveRecord::StatementInvalid) do |e|
      raise e unless defined?(::PG) && [::PG::DataException, ::PG::CheckViolation].any? { |k| e.cause.is_a?(k) }

      render plain: "refused: #{Flow.refusal(e)}", status: :unprocessable_entity
    end

    def index
      @notice = take_notice
      @rules = dashboard_connection { |c| Flow.rules(c) }
    end

    def pause
      kind, target = rule
      r = dashboard_connection { |c| Flow.pause(c, kind, target, actor: dashboard_actor) }
      notice!("Paused #{kind} #{target}: #{r[:held]} pending held (action ##{r[:action_id]}).")
      redirect_to flow_path
    end

    def resume
      kind, target = rule
      rate = EventList.text(params, :rate).to_s.strip
      rate = nil if rate.empty?
      r = dashboard_connection { |c| Flow.resume(c, kind, target, rate: rate, actor: dashboard_actor) }
      notice!("Resumed #{kind} #{target}#{rate ? " at #{rate} events/s" : ''}: #{r[:released]} due now " \
              "(action ##{r[:action_id]}).")
      redirect_to flow_path
    end

    private

    def rule
      kind = EventList.text(params, :kind).to_s
      target = EventList.text(params, :target).to_s
      raise EventList::BadFilter, "kind: one of #{Flow::KINDS.join(', ')}" unless Flow::KINDS.include?(kind)
      raise EventList::BadFilter, "target: a route pattern, scope or destination name is needed" if target.empty?

      [kind, target]
    end
  end
end
