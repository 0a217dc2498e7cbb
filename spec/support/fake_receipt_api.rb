# frozen_string_literal: true

require "webrick"
require "json"

# FakeReceiptApi - an external API with idempotency keys, like Stripe's or a mail provider's:
# a POST with an Idempotency-Key it has seen returns the first answer and does nothing again.
# #effects counts the real side effects per key.
class FakeReceiptApi
  attr_reader :effects

  def initialize
    @effects = Hash.new(0)
    @answers = {}
    @lock = Mutex.new
    @server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0,
                                      Logger: WEBrick::Log.new(File::NULL), AccessLog: [])
    @server.mount_proc("/receipts") { |req, res| answer(req, res) }
    @thread = Thread.new { @server.start }
  end

  def url
    "http://127.0.0.1:#{@server.config[:Port]}"
  end

  def stop
    @server.shutdown
    @thread.join
  end

  private

  def answer(req, res)
    key = req["Idempotency-Key"].to_s
    return res.status = 400 if key.empty? || req.request_method != "POST"

    body = @lock.synchronize do
      @answers[key] ||= begin
        @effects[key] += 1
        JSON.generate(id: "rcpt_#{@answers.size + 1}")
      end
    end
    res.status = 200
    res["Content-Type"] = "application/json"
    res.body = body
  end
end
