# frozen_string_literal: true

module WebhookInbox
  # Requeue quarantined effects (one, or an EffectList filter): GET shows how many would
  # move now and asks to confirm; POST (CSRF-checked) moves them and records the action with
  # the dashboard's actor in webhook_inbox_actions, in one transaction (EffectList#requeue!).
  # A filter that leaves out none of the quarantined effects (EffectList#every_effect?) is
  # refused, as BulkController refuses one for events.
  class EffectRequeuesController < ApplicationController
    def new
      @list = filtered_list or return
      @count = dashboard_connection { |c| @list.requeue_count(c) }
    end

    def create
      list = filtered_list or return
      moved, id = dashboard_connection { |c| list.requeue!(c, dashboard_actor) }
      expected = params[:expected].to_s
      notice!("Requeued #{moved} effect#{'s' unless moved == 1} (action ##{id}" \
              "#{expected.empty? || expected == moved.to_s ? '' : "; #{expected} were shown when you confirmed"}).")
      if (op = list.filter["operation_id"]) && moved == 1
        redirect_to effect_path(id: op)
      else
        redirect_to actions_path
      end
    end

    private

    def filtered_list
      list = EffectList.new(params)
      return list unless dashboard_connection { |c| list.every_effect?(c) }

      render plain: "give a filter that leaves some out (destination, handler, operation id, event, error text, or a " \
                    "time range inside the quarantined effects): requeuing every quarantined effect is refused here " \
                    "(rake webhook_inbox:requeue_effects ALL=1 does it)", status: :unprocessable_entity
      nil
    end
  end
end
