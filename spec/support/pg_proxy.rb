# frozen_string_literal: true

require "socket"

# PgProxy - a TCP proxy in front of a PostgreSQL server that can run SQL on the server
# sessions behind the client's back, between the client's statements: what a pooler does
# (pgbouncer's server_reset_query = DISCARD ALL, or a transaction-pooling hand-over that
# gives the client a session without its prepared statements). Bytes are forwarded as they
# come; only an injected statement's answer is parsed (and swallowed).
class PgProxy
  def initialize(upstream_port)
    @upstream_port = upstream_port
    @server = TCPServer.new("127.0.0.1", 0)
    @sessions = [] # [client, upstream, mutex]
    @lock = Mutex.new
    @acceptor = Thread.new { accept_loop }
  end

  def port
    @server.addr[1]
  end

  # Runs sql (simple query protocol) on every proxied server session and discards its
  # answer. The clients must be idle (no statement in flight).
  def inject(sql)
    @lock.synchronize { @sessions.dup }.each do |_client, upstream, mutex|
      mutex.synchronize do
        upstream.write(["Q", sql.bytesize + 5, sql].pack("aNZ*"))
        loop do
          type, len = read_exactly(upstream, 5).unpack("aN")
          body = read_exactly(upstream, len - 4)
          raise "injected #{sql.inspect} failed: #{body}" if type == "E"
          break if type == "Z"
        end
      end
    end
  end

  def close
    @acceptor.kill
    @server.close
    @lock.synchronize { @sessions.each { |c, u, _| [c, u].each { |s| s.close rescue nil } } } # rubocop:disable Style/RescueModifier
  end

  private

  def accept_loop
    loop do
      client = @server.accept
      upstream = TCPSocket.new("127.0.0.1", @upstream_port)
      session = [client, upstream, Mutex.new]
      @lock.synchronize { @sessions << session }
      Thread.new { pump(*session) }
    end
  end

  def pump(client, upstream, mutex)
    peer = { client => upstream, upstream => client }
    loop do
      ready, = IO.select([client, upstream], nil, nil, 0.05)
      next unless ready

      mutex.synchronize do
        ready.each do |io|
          data = io.read_nonblock(65_536, exception: false)
          next if data == :wait_readable
          return [client, upstream].each { |s| s.close rescue nil } if data.nil? # rubocop:disable Style/RescueModifier

          peer[io].write(data)
        end
      end
    end
  rescue IOError, SystemCallError
    [client, upstream].each { |s| s.close rescue nil } # rubocop:disable Style/RescueModifier
  end

  def read_exactly(io, n)
    buf = +""
    buf << io.readpartial(n - buf.bytesize) while buf.bytesize < n
    buf
  end
end
