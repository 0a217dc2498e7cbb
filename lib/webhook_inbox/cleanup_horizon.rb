# frozen_string_literal: true

module WebhookInbox
  # CleanupHorizon - what keeps VACUUM from removing the row versions that processed events
  # leave behind (issue 33): while one is held, every claim walks over them again and a backlog
  # drains slower the bigger it is. The holders: a session of this database (its snapshot, or
  # the transaction id of an idle transaction that wrote), a replica with hot_standby_feedback
  # (its walsender's xmin), a replication slot, a prepared transaction. Read from
  # pg_stat_activity, pg_stat_replication, pg_replication_slots and pg_prepared_xacts; never
  # reads a query's text. Other roles' sessions show their xmin only to a role with
  # pg_read_all_stats (pg_monitor). Used by `webhook_inbox:doctor` and the dashboard; the
  # sidecar exports the same horizon as webhook_inbox_cleanup_horizon_* gauges.
  module CleanupHorizon
    # kind: session, replica, slot or prepared; pid: nil for slots and prepared transactions;
    # name: application_name, the slot's name or the prepared transaction's gid; state:
    # pg_stat_activity's state (replica: its walsender's state; slot: active/inactive);
    # xid_age: transactions since its xmin; age_s: seconds its transaction is open (nil: unknown).
    Holder = Struct.new(:kind, :pid, :name, :state, :xid_age, :age_s) do
      # Held back: its transaction has been open held_s seconds, or its xmin is held_xids
      # transactions old (replicas and slots have no start time). Defaults: the configuration's
      # cleanup_held_seconds and cleanup_held_transactions.
      def held?(held_s: WebhookInbox.configuration.cleanup_held_seconds,
                held_xids: WebhookInbox.configuration.cleanup_held_transactions)
        (age_s && age_s >= held_s) || xid_age >= held_xids
      end

      # "session pid 42 (application_name "report", idle in transaction, open 3605s, xmin 1200 transactions old)"
      def to_s
        what = case kind
               when "session" then "session pid #{pid} (application_name #{name.to_s.inspect}, #{state || 'state unknown'}"
               when "replica" then "replica pid #{pid} with hot_standby_feedback (application_name #{name.to_s.inspect}, #{state}"
               when "slot" then "replication slot #{name.to_s.inspect} (#{state}"
               else "prepared transaction #{name.to_s.inspect} (prepared"
               end
        "#{what}#{", open #{age_s}s" if age_s}, xmin #{xid_age} transactions old)"
      end
    end

    SQL = <<~SQL
      SELECT kind, pid, name, state, xid_age, age_s FROM (
        SELECT 'session' AS kind, pid, application_name AS name, state,
               greatest(age(backend_xmin), age(backend_xid))::bigint AS xid_age,
               extract(epoch FROM now() - xact_start)::bigint AS age_s
          FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type <> 'autovacuum worker'
           AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
        UNION ALL
        SELECT 'replica', pid, application_name, state, age(backend_xmin)::bigint, NULL
          FROM pg_stat_replication WHERE backend_xmin IS NOT NULL
        UNION ALL
        SELECT 'slot', NULL, slot_name::text, CASE WHEN active THEN 'active' ELSE 'inactive' END, age(xmin)::bigint, NULL
          FROM pg_replication_slots WHERE xmin IS NOT NULL
        UNION ALL
        SELECT 'prepared', NULL, gid, 'prepared', age(transaction)::bigint, extract(epoch FROM now() - prepared)::bigint
          FROM pg_prepared_xacts WHERE database = current_database()) h
       ORDER BY xid_age DESC, age_s DESC NULLS LAST LIMIT 1
    SQL

    # The holder of the oldest xmin, or nil when none holds one. connection: an ActiveRecord
    # connection (select_rows). Raises what the connection raises.
    def self.oldest(connection)
      row = connection.select_rows(SQL, "webhook_inbox cleanup horizon").first or return nil
      kind, pid, name, state, xid_age, age_s = row
      Holder.new(kind, pid&.to_i, name, state, xid_age.to_i, age_s&.to_i)
    end
  end
end
