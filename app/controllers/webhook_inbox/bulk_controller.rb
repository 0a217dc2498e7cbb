# frozen_string_literal: true

module WebhookInbox
  # Requeue (quarantined -> pending) and replay (done -> pending), for one event or a filter:
  # GET shows how many events would move now (webhook_inbox_requeue_count) and asks to
  # confirm; POST (CSRF-checked) runs webhook_inbox_requeue, which records who and when in
  # webhook_inbox_actions, and publishes requeue.webhook_inbox. A filter that leaves out none of the quarantined or done events
  # (empty, a type of "*", a time range holding them all: EventList#every_event?) is refused.
  class BulkController < ApplicationController
    ACTIONS = { "requeue" => "quarantined", "replay" => "done" }.freeze # each action and the status it moves

    def new
      @kind, @list = kind_and_list
      return unless @kind

      @count = dashboard_connection do |c|
        c.select_value("SELECT webhook_inbox_requeue_count($1, $2::jsonb)", "WebhookInbox requeue count",
                       [@kind, JSON.generate(@list.to_requeue_filter)])
      end.to_i
    end

    def create
      kind, list = kind_and_list
      return unless kind

      filter = list.to_requeue_filter
      payload = ->((moved, id)) { { kind: kind, filter: filter, moved: moved.to_i, action_id: id.to_i, actor: dashboard_actor } }
      moved, id = Instrumentation.instrument("requeue.webhook_inbox", payload) do
        dashboard_connection do |c|
          c.select_rows("SELECT moved, action_id FROM webhook_inbox_requeue($1, $2::jsonb, $3)", "WebhookInbox requeue",
                        [kind, JSON.generate(filter), dashboard_actor]).first
        end
      end
      expected = params[:expected].to_s
      notice!("#{kind == 'requeue' ? 'Requeued' : 'Replayed'} #{moved} event#{'s' unless moved.to_i == 1} " \
              "(action ##{id}#{expected.empty? || expected == moved.to_s ? '' : "; #{expected} were shown when you confirmed"}).")
      if list.filter.key?("scope") && list.filter.key?("event_id") && moved.to_i == 1
        redirect_to event_path(scope: list.filter["scope"], id: list.filter["event_id"])
      else
        redirect_to actions_path
      end
    end

    private

    def kind_and_list
      kind = params[:kind].to_s
      list = EventList.new(params)
      if !ACTIONS.include?(kind)
        render plain: "kind must be requeue or replay", status: :unprocessable_entity
        nil
      elsif dashboard_connection { |c| list.every_event?(c, ACTIONS[kind]) }
        render plain: "give a filter that leaves some out (scope, event id, type, a time range inside the stored " \
                      "events, or error text): a bulk action on every #{ACTIONS[kind]} event is refused here",
               status: :unprocessable_entity
        nil
      else
        [kind, list]
      end
    end
  end
end
