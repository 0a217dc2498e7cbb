# frozen_string_literal: true

# CitusEvents - for spec/citus groups that count handler runs under running sidecars. The group
# defines events_name (e.g. "nodes"); CitusEvents.create_handler makes, on the cluster, the table
# NAME_runs (one row per handler run, co-located with the inbox and movable by logical
# replication), the row handler NAME_handler(webhook_inbox) writing it and a route from NAME.*
# to it. The examples then get spawn_sidecar, receive, states, runs and on_node; sql and bin come
# from CitusClusterSpec and the group.
module CitusEvents
  def self.create_handler(cluster, name)
    cluster.psql(<<~SQL)
      SET citus.multi_shard_modify_mode TO sequential;
      CREATE TABLE #{name}_runs (source_scope text NOT NULL, event_id text NOT NULL);
      ALTER TABLE #{name}_runs REPLICA IDENTITY FULL; -- moved by logical replication with the inbox's shards
      SELECT create_distributed_table('#{name}_runs', 'source_scope', colocate_with => 'webhook_inbox');
      CREATE FUNCTION #{name}_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO #{name}_runs VALUES (ev.source_scope, ev.event_id);
          RETURN 'ran';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('#{name}.*', '#{name}_handler');
    SQL
  end

  # A running sidecar (2 connections, batches of 20, polling every 0.1 s) logging to log; its pid.
  def spawn_sidecar(log, *extra)
    Process.spawn(bin, "run", "--database-url", cluster.url, "--concurrency", "2", "--poll-interval", "0.1s",
                  "--batch-size", "20", "--max-attempts", "3", "--log-level", "warn", *extra, out: log, err: log)
  end

  # count pending events PREFIX_i of type NAME.one over scopes scope_0.. (one INSERT).
  def receive(prefix, count, scopes: 50)
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
        "SELECT 'scope_' || (i % #{scopes}), '#{prefix}_' || i, '#{events_name}.one', '{}' FROM generate_series(1, #{count}) i")
  end

  # "status attempts xN, ..." of the events with this prefix.
  def states(prefix)
    sql("SELECT string_agg(s || ' x' || n, ', ' ORDER BY s) FROM (SELECT status || ' ' || attempts AS s, count(*) AS n " \
        "FROM webhook_inbox WHERE event_id LIKE '#{prefix}\\_%' GROUP BY 1) x")
  end

  # "handler runs, distinct events run" of this prefix.
  def runs(prefix)
    sql("SELECT count(*) || ' ' || count(DISTINCT (source_scope, event_id)) FROM #{events_name}_runs " \
        "WHERE event_id LIKE '#{prefix}\\_%'")
  end

  # Events of this prefix on the shards of the worker on port.
  def on_node(prefix, port)
    sql("SELECT count(*) FROM webhook_inbox w JOIN pg_dist_shard_placement p " \
        "ON p.shardid = get_shard_id_for_distribution_column('webhook_inbox', w.source_scope) " \
        "WHERE w.event_id LIKE '#{prefix}\\_%' AND p.nodeport = #{port}").to_i
  end
end
