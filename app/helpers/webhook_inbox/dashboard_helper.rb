# frozen_string_literal: true

module WebhookInbox
  # Formatting and the inline SVG charts of the dashboard (no JavaScript, no assets).
  module DashboardHelper
    # A bar chart of values (numbers or nil) labelled by labels, as an inline <svg>. Only
    # numbers and escaped labels reach the markup.
    def wi_bar_chart(values, labels, title:, color: "#3b6ea5", unit: "")
      values = values.map { |v| v.to_f }
      width = 360
      height = 90
      max = [values.max.to_f, 1.0].max
      step = width.to_f / [values.size, 1].max
      bars = values.each_with_index.map do |v, i|
        h = (v / max * (height - 14)).round(1)
        tag.rect(x: (i * step + 1).round(1), y: (height - 12 - h).round(1), width: (step - 2).round(1), height: h,
                 fill: color) { tag.title("#{labels[i]}: #{format_number(v)}#{unit}") }
      end
      ticks = [0, values.size / 2, values.size - 1].uniq.select { |i| i >= 0 && labels[i] }.map do |i|
        tag.text(labels[i], x: (i * step + 1).round(1), y: height - 1, "font-size": 9, fill: "#666")
      end
      tag.figure(class: "chart") do
        safe_join([tag.figcaption("#{title} (max #{format_number(max)}#{unit})"),
                   tag.svg(safe_join(bars + ticks), xmlns: "http://www.w3.org/2000/svg", width: width, height: height,
                                                   viewBox: "0 0 #{width} #{height}", role: "img", "aria-label": title)])
      end
    end

    def format_number(v)
      return "–" if v.nil?

      f = v.to_f
      f == f.round ? f.round.to_s : format("%.1f", f)
    end

    def format_age(seconds)
      s = seconds.to_f
      if s < 120 then "#{s.round(1)} s"
      elsif s < 7200 then "#{(s / 60).round(1)} min"
      elsif s < 172_800 then "#{(s / 3600).round(1)} h"
      else "#{(s / 86_400).round(1)} d"
      end
    end

    def status_badge(status, attempts = 0)
      label = status == "pending" && attempts.to_i.positive? ? "retrying" : status
      tag.span(label, class: "badge #{label}")
    end

    # The attempts an event was charged: its SQL route's (on the event) and its Ruby handler
    # runs' (each charged on its run, not on the event: an event handed to Ruby handlers keeps
    # 0). "1 (Ruby handler MarkPaid: 1)"; the event's own count alone when it has no runs.
    def attempts_charged(event, runs)
      own = event["attempts"].to_i
      return own.to_s if runs.blank?

      parts = runs.map { |r| "Ruby handler #{r['handler']}: #{r['attempts'].to_i}" }
      parts.unshift("SQL route: #{own}") if own.positive?
      "#{own + runs.sum { |r| r['attempts'].to_i }} (#{parts.join('; ')})"
    end

    def event_link(row)
      link_to(row["event_id"], event_path(scope: row["source_scope"], id: row["event_id"]))
    end

    # Where an effect goes: its destination, or "Ruby handler NAME" for a Ruby handler's run.
    def effect_target(row)
      row["handler"] ? "Ruby handler #{row['handler']}" : row["destination"]
    end

    def effect_link(row)
      link_to(row["operation_id"], effect_path(id: row["operation_id"]))
    end

    # The emitting event of an effect, linked; "–" when it was emitted outside a handler.
    def effect_event_link(row)
      return "–" unless row["source_scope"] && row["source_event_id"]

      link_to(row["source_event_id"], event_path(scope: row["source_scope"], id: row["source_event_id"]))
    end
  end
end
