# frozen_string_literal: true

module WebhookInbox
  # The outbox on the dashboard (EffectList): the effects list (filters, keyset pages) and
  # one effect: its attempts, last answer (redacted like payloads), error, payload and the
  # event that emitted it; a Ruby handler run also shows its entries in that event's log.
  # Requeue goes through EffectRequeuesController's confirmation.
  class EffectsController < ApplicationController
    def index
      @list = EffectList.new(params)
      limit = WebhookInbox.configuration.dashboard_page_size.to_i.clamp(1, 500)
      @effects, @next_cursor = dashboard_connection { |c| @list.page(c, cursor: params[:cursor], limit: limit) }
    end

    def show
      id = EventList.text(params, :id).to_s
      @effect, @log = dashboard_connection do |c|
        effect = EffectList.find(c, id)
        [effect, effect && EffectList.handler_log(c, effect)]
      end
      return head(:not_found) unless @effect

      @notice = take_notice
      @payload = PayloadView.new.render(@effect["payload"])
      @answer = answer(@effect["response_excerpt"])
    end

    private

    # The answer's excerpt as shown: JSON pretty-printed and redacted like a payload; text
    # (or JSON cut at 1000 characters) with its secret-looking values masked.
    def answer(text)
      return nil if text.nil?

      PayloadView.new.render(text)
    rescue JSON::ParserError
      Redactor.new.redact_text(text)
    end
  end
end
