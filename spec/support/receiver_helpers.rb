# frozen_string_literal: true

require "securerandom"
require "socket"

# ReceiverHelpers - schema setup and row inspection for the receiver's specs (Inbox,
# Endpoint, Rails, Puma). Rows are read back with psql, never through the code under test.
module ReceiverHelpers
  ROOT = File.expand_path("../..", __dir__)

  # The committed migrations, in order (a sibling's work in progress is not applied).
  def self.schema_files
    Dir.chdir(ROOT) { `git ls-files -- 'db/*.sql'`.split("\n") }
       .reject { |f| f.include?("/examples/") }.sort.map { |f| File.join(ROOT, f) }
  end

  def self.apply_schema(pg)
    schema_files.each { |f| pg.psql(File.read(f)) }
  end

  # A database URL ActiveRecord understands (TCP) for a ThrowawayPostgres.
  def self.ar_url(pg)
    user = pg.url[/user=(\S+)/, 1]
    "postgresql://#{user}@127.0.0.1:#{pg.port}/#{pg.dbname}"
  end

  def self.free_port
    s = TCPServer.new("127.0.0.1", 0)
    s.addr[1]
  ensure
    s&.close
  end

  def unique_scope(prefix = "test")
    "#{prefix}:#{SecureRandom.hex(6)}:live"
  end

  # Rows of webhook_inbox for scope as hashes (psql, unaligned, '|' separated).
  def inbox_rows(pg, scope)
    out = pg.psql(<<~SQL)
      SELECT event_id, event_type, status, coalesce(payload::text, ''), coalesce(encode(raw_body, 'escape'), ''),
             coalesce(last_error, ''), processed_at IS NOT NULL
      FROM webhook_inbox WHERE source_scope = '#{scope.gsub("'", "''")}' ORDER BY event_id
    SQL
    out.split("\n").map do |line|
      id, type, status, payload, raw, err, processed = line.split("|", 7)
      { event_id: id, event_type: type, status: status, payload: payload, raw_body: raw,
        last_error: err, processed: processed == "t" }
    end
  end

  def inbox_count(pg, scope)
    pg.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{scope.gsub("'", "''")}'").to_i
  end
end
