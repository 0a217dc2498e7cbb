# frozen_string_literal: true

require "webrick"
require "json"

# FakeReceiptApi - an external API with idempotency keys, like Stripe's or a mail provider's:
# a POST with an Idempotency-Key it has seen returns the first answer and does nothing again.
# #effects counts the real side effects per key; #requests records every request (key,
# headers, body, time), in order. For the outbox specs it also answers, by path:
#   /receipts          200 {"id": "rcpt_N"} (idempotent, as above)
#   /status/NNN[/S]    NNN (with Retry-After: S when given), no side effect
#   /flaky/N           503 for the first N requests of a key, then like /receipts
#   /slow/S            sleeps S seconds, then like /receipts
#   /tricky            200 TRICKY_BODY: quotes, backslashes, braces, commas, "NULL", non-ASCII
# #before_answer = ->(req) { ... } runs after the side effect, before the answer is sent.
class FakeReceiptApi
  Request = Struct.new(:path, :key, :headers, :body, :at, keyword_init: true)
  TRICKY_BODY = JSON.generate(id: %(r"1\\), note: %(a,b {c} "NULL" \\" caf\u00e9 \\N)).freeze

  attr_reader :effects, :requests
  attr_accessor :before_answer

  def initialize
    @effects = Hash.new(0)
    @answers = {}
    @requests = []
    @seen = Hash.new(0)
    @in_flight = Hash.new(0)
    @max_in_flight = Hash.new(0)
    @lock = Mutex.new
    @server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, MaxClients: 200,
                                      Logger: WEBrick::Log.new(File::NULL), AccessLog: [])
    @server.mount_proc("/") { |req, res| track(req.path) { route(req, res) } }
    @thread = Thread.new { @server.start }
  end

  # The body the API answered for key (nil before its first request).
  def answer_for(key) = @lock.synchronize { @answers[key] }

  def url
    "http://127.0.0.1:#{@server.config[:Port]}"
  end

  def keys
    @lock.synchronize { @requests.map(&:key) }
  end

  # The most requests to path that were in progress at once.
  def max_in_flight(path)
    @lock.synchronize { @max_in_flight[path] }
  end

  def stop
    @server.shutdown
    @thread.join
  end

  private

  def track(path)
    @lock.synchronize { @max_in_flight[path] = [@max_in_flight[path], @in_flight[path] += 1].max }
    yield
  ensure
    @lock.synchronize { @in_flight[path] -= 1 }
  end

  def route(req, res)
    key = req["Idempotency-Key"].to_s
    headers = req.header.transform_values(&:first)
    seen = @lock.synchronize do
      @requests << Request.new(path: req.path, key: key, headers: headers, body: req.body.to_s,
                               at: Process.clock_gettime(Process::CLOCK_MONOTONIC))
      @seen[[req.path, key]] += 1
    end
    case req.path
    when %r{\A/status/(\d+)(?:/(\d+))?\z}
      res.status = Integer(Regexp.last_match(1))
      res["Retry-After"] = Regexp.last_match(2) if Regexp.last_match(2)
      res.body = JSON.generate(error: "status #{res.status}")
    when %r{\A/flaky/(\d+)\z}
      return (res.status = 503) if seen <= Integer(Regexp.last_match(1))

      answer(req, res, key)
    when %r{\A/slow/([\d.]+)\z}
      sleep Float(Regexp.last_match(1))
      answer(req, res, key)
    when "/tricky"
      res.status = 200
      res.body = TRICKY_BODY
    else
      answer(req, res, key)
    end
  end

  def answer(req, res, key)
    return res.status = 400 if key.empty? || req.request_method != "POST"

    body = @lock.synchronize do
      @answers[key] ||= begin
        @effects[key] += 1
        JSON.generate(id: "rcpt_#{@answers.size + 1}")
      end
    end
    before_answer&.call(req)
    res.status = 200
    res["Content-Type"] = "application/json"
    res.body = body
  end
end
