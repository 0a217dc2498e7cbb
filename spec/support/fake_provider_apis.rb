# frozen_string_literal: true

require "webrick"
require "json"
require "openssl"
require "uri"
require "base64"
require "securerandom"
require "time"

# FakeProviderApis - local stand-ins for the providers' "what we sent" APIs, following their
# documented shapes, pagination and errors, for the reconcile specs (the sidecar is pointed
# at them with WEBHOOK_INBOX_TEST_<PROVIDER>_API, which it takes for loopback URLs only).
#
#   Stripe  GET /v1/events: Bearer key; newest first; limit (<= 100), starting_after,
#           created[gte]/[lte], delivery_success; Stripe-Account selects a connected
#           account's events; {"object": "list", "data": [...], "has_more": bool}.
#   GitHub  GET /repos/O/R/hooks/ID/deliveries: Bearer token; newest first; per_page,
#           cursor, Link: <...&cursor=...>; rel="next"; POST .../deliveries/:id/attempts
#           answers 202 and redelivers the stored request (deliver.call(body, headers) ->
#           HTTP status), recorded as a new attempt with redelivery: true.
#           GET /app/hook/deliveries and POST /app/hook/deliveries/:id/attempts: the same for a
#           GitHub App's own webhook (add_delivery(app: true)), authenticated with an App JWT:
#           RS256 verified with the App's public key, iss the App id, exp - iat <= 600 and
#           exp not past, else 401; #app_claims records each verified token's claims.
#   Paddle  GET /events: Bearer key; order_by id[ASC] (default) or id[DESC]; per_page
#           (<= 200, default 50), after (an event id); {"data": [...], "meta": {"request_id",
#           "pagination": {"per_page", "next" (URL with after=), "has_more", "estimated_total"}}};
#           errors {"error": {"type", "code", "detail"}, "meta": {...}}.
#   Square  POST /v2/events/search: Bearer token; JSON {cursor, limit (<= 100), query:
#           {filter: {created_at: {start_at, end_at}, merchant_ids}, sort: {field, order}}};
#           start_at older than 28 days is refused (400); {"events": [...], "metadata": [...],
#           "cursor": ...} with "events" and "cursor" left out when there are none;
#           errors {"errors": [{"category", "code", "detail"}]}.
#
# #stripe_repeats = true makes GET /v1/events ignore starting_after: every page is the first
# one again (has_more: true, the same last id), as a broken API or proxy cache would answer.
# #fault(status:, retry_after:, cut:, times:, &match) scripts errors: the next `times`
# requests match.call(request) is true for answer `status` (with Retry-After), or, with
# cut: true, a 200 whose body stops halfway (the connection closes mid-answer). #requests
# records every request (method, path, query params) in order; never the key.
class FakeProviderApis
  Request = Struct.new(:method, :path, :params, :account, keyword_init: true)
  Fault = Struct.new(:match, :status, :retry_after, :cut, :times)

  attr_reader :requests, :app_claims
  attr_accessor :deliver, :stripe_repeats

  def initialize(stripe_key: "sk_test_fake", github_token: "ghp_fake", paddle_key: "pdl_sdbx_apikey_fake",
                 square_token: "EAAAfake", github_app: nil)
    @stripe_key = stripe_key
    @github_token = github_token
    @paddle_key = paddle_key
    @square_token = square_token
    @github_app = github_app                # {id:, public_key:} of the GitHub App, or nil
    @app_ids = {}                           # ids of the App's attempts
    @app_claims = []
    @paddle = []                            # Paddle events, any order
    @square = []                            # Square events, any order
    @events = Hash.new { |h, k| h[k] = [] } # account (nil: the platform) => events, any order
    @deliveries = []                        # GitHub attempts, any order
    @payloads = {}                          # delivery id => [body, headers]
    @faults = []
    @requests = []
    @lock = Mutex.new
    @next_id = 1000
    @server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, Logger: WEBrick::Log.new(File::NULL),
                                      AccessLog: [])
    @server.mount_proc("/") { |req, res| route(req, res) }
    @thread = Thread.new { @server.start }
  end

  def url
    "http://127.0.0.1:#{@server.config[:Port]}"
  end

  def stop
    @server.shutdown
    @thread.join
  end

  def add_event(event, account: nil)
    @lock.synchronize { @events[account] << event }
  end

  def add_paddle_event(event)
    @lock.synchronize { @paddle << event }
  end

  def add_square_event(event)
    @lock.synchronize { @square << event }
  end

  # A GitHub attempt: the request GitHub sent (body, headers) and the answer it got.
  # app: true, an attempt of the GitHub App's own webhook (listed at /app/hook/deliveries only).
  def add_delivery(guid:, event:, body:, headers:, status_code:, delivered_at:, redelivery: false, app: false)
    @lock.synchronize do
      id = (@next_id += 1)
      @deliveries << { "id" => id, "guid" => guid, "delivered_at" => delivered_at.utc.iso8601,
                       "redelivery" => redelivery, "duration" => 0.1, "status" => status_code.between?(200, 299) ? "OK" : "failed",
                       "status_code" => status_code, "event" => event, "action" => nil,
                       "installation_id" => app ? 4242 : nil, "repository_id" => 1 }
      @payloads[id] = [body, headers]
      @app_ids[id] = true if app
      id
    end
  end

  def deliveries
    @lock.synchronize { @deliveries.map(&:dup) }
  end

  def fault(status: 200, retry_after: nil, cut: false, times: 1, &match)
    @lock.synchronize { @faults << Fault.new(match, status, retry_after, cut, times) }
  end

  def requests_to(path_prefix)
    @lock.synchronize { @requests.select { |r| r.path.start_with?(path_prefix) } }
  end

  private

  def route(req, res)
    params = URI.decode_www_form(req.query_string.to_s).to_h
    params = square_params(req) if req.request_method == "POST" && req.path == "/v2/events/search"
    r = Request.new(method: req.request_method, path: req.path, params: params, account: req["Stripe-Account"])
    @lock.synchronize { @requests << r }
    res["Content-Type"] = "application/json"
    fault = take_fault(r)
    return answer_fault(fault, res) if fault && !fault.cut

    case [req.request_method, req.path]
    in ["GET", "/v1/events"] then stripe_events(req, r, res, fault)
    in ["GET", "/events"] then paddle_events(req, r, res, fault)
    in ["POST", "/v2/events/search"] then square_search(req, r, res, fault)
    in ["GET", %r{\A/(repos/[^/]+/[^/]+|orgs/[^/]+)/hooks/\d+/deliveries\z}] then github_list(req, r, res, fault)
    in ["POST", %r{\A/(?:repos/[^/]+/[^/]+|orgs/[^/]+)/hooks/\d+/deliveries/(\d+)/attempts\z}]
      github_redeliver(req, Integer(Regexp.last_match(1)), res)
    in ["GET", "/app/hook/deliveries"] then github_list(req, r, res, fault, app: true)
    in ["POST", %r{\A/app/hook/deliveries/(\d+)/attempts\z}]
      github_redeliver(req, Integer(Regexp.last_match(1)), res, app: true)
    else
      res.status = 404
      res.body = JSON.generate(message: "Not Found")
    end
  end

  def take_fault(r)
    @lock.synchronize do
      f = @faults.find { |x| x.times.positive? && x.match.call(r) }
      f&.times -= 1
      f
    end
  end

  def answer_fault(fault, res)
    res.status = fault.status
    res["Retry-After"] = fault.retry_after.to_s if fault.retry_after
    res.body = JSON.generate(error: { type: "api_error", message: "fault #{fault.status}" })
  end

  def bearer?(req, key)
    req["Authorization"] == "Bearer #{key}"
  end

  def unauthorized(res, message)
    res.status = 401
    res.body = JSON.generate(error: { type: "invalid_request_error", message: message })
  end

  def send_body(res, body, fault)
    return (res.body = body) unless fault&.cut

    # Half the answer, then the connection closes: chunked, and the body's writer fails.
    res.chunked = true
    res.body = proc do |out|
      out << body[0, body.bytesize / 2]
      raise IOError, "cut halfway"
    end
  end

  def stripe_events(req, r, res, fault)
    return unauthorized(res, "Invalid API Key provided") unless bearer?(req, @stripe_key)

    p = r.params
    limit = Integer(p.fetch("limit", "10")).clamp(1, 100)
    list = @lock.synchronize { @events[r.account].dup }
    list.select! { |e| e["created"] >= Integer(p["created[gte]"]) } if p["created[gte]"]
    list.select! { |e| e["created"] <= Integer(p["created[lte]"]) } if p["created[lte]"]
    list.select! { |e| e["pending_webhooks"].to_i.positive? } if p["delivery_success"] == "false"
    list.sort_by! { |e| [-e["created"], e["id"]] }
    if p["starting_after"] && !stripe_repeats
      i = list.index { |e| e["id"] == p["starting_after"] }
      unless i
        res.status = 400
        return res.body = JSON.generate(error: { type: "invalid_request_error", message: "No such event" })
      end
      list = list[(i + 1)..]
    end
    page = list.first(limit)
    send_body(res, JSON.generate(object: "list", url: "/v1/events", has_more: list.size > limit, data: page), fault)
  end

  def paddle_events(req, r, res, fault)
    unless bearer?(req, @paddle_key)
      res.status = 401
      return res.body = JSON.generate(error: { type: "request_error", code: "invalid_token",
                                               detail: "Authentication token is invalid." },
                                      meta: { request_id: SecureRandom.uuid })
    end

    p = r.params
    per_page = Integer(p.fetch("per_page", "50")).clamp(1, 200)
    list = @lock.synchronize { @paddle.sort_by { |e| e["event_id"] } }
    list.reverse! if p["order_by"] == "id[DESC]"
    if p["after"]
      i = list.index { |e| e["event_id"] == p["after"] }
      unless i
        res.status = 400
        return res.body = JSON.generate(error: { type: "request_error", code: "invalid_field", detail: "after" })
      end
      list = list[(i + 1)..]
    end
    page = list.first(per_page)
    nxt = "#{url}/events?after=#{page.last&.dig("event_id")}&order_by=#{URI.encode_www_form_component(p.fetch("order_by", "id[ASC]"))}&per_page=#{per_page}"
    send_body(res, JSON.generate(data: page, meta: { request_id: SecureRandom.uuid,
                                                    pagination: { per_page: per_page, next: nxt,
                                                                  has_more: list.size > per_page,
                                                                  estimated_total: list.size } }), fault)
  end

  def square_params(req)
    q = JSON.parse(req.body.to_s)
    f = q.dig("query", "filter") || {}
    { "cursor" => q["cursor"], "limit" => q["limit"], "start_at" => f.dig("created_at", "start_at"),
      "end_at" => f.dig("created_at", "end_at"), "merchant_ids" => f["merchant_ids"],
      "order" => q.dig("query", "sort", "order") }.compact
  rescue JSON::ParserError
    { "invalid" => true }
  end

  def square_error(res, status, category, code, detail)
    res.status = status
    res.body = JSON.generate(errors: [{ category: category, code: code, detail: detail }])
  end

  def square_search(req, r, res, fault)
    return square_error(res, 401, "AUTHENTICATION_ERROR", "UNAUTHORIZED", "This request could not be authorized.") unless bearer?(req, @square_token)

    p = r.params
    return square_error(res, 400, "INVALID_REQUEST_ERROR", "INVALID_JSON", "invalid JSON") if p["invalid"]

    start_at = p["start_at"] ? Time.iso8601(p["start_at"]) : Time.now - (28 * 86_400)
    if start_at < Time.now - (28 * 86_400)
      return square_error(res, 400, "INVALID_REQUEST_ERROR", "INVALID_TIME_RANGE", "start_at is older than 28 days")
    end

    end_at = p["end_at"] ? Time.iso8601(p["end_at"]) : Time.now
    limit = Integer(p.fetch("limit", 100)).clamp(1, 100)
    list = @lock.synchronize { @square.dup }
    list.select! { |e| Time.iso8601(e["created_at"]).between?(start_at, end_at) }
    list.select! { |e| p["merchant_ids"].include?(e["merchant_id"]) } if p["merchant_ids"]
    list.sort_by! { |e| [e["created_at"], e["event_id"]] }
    list.reverse! unless p["order"] == "ASC"
    if p["cursor"] # opaque to the client: here the last event id shown, base64
      last = Base64.strict_decode64(p["cursor"])
      i = list.index { |e| e["event_id"] == last } or
        return square_error(res, 400, "INVALID_REQUEST_ERROR", "INVALID_CURSOR", "cursor")
      list = list[(i + 1)..]
    end
    page = list.first(limit)
    out = {}
    unless page.empty?
      out[:events] = page
      out[:metadata] = page.map { |e| { event_id: e["event_id"], api_version: "2025-01-23" } }
    end
    out[:cursor] = Base64.strict_encode64(page.last["event_id"]) if list.size > limit
    send_body(res, JSON.generate(out), fault)
  end

  # The claims of a valid App JWT in Authorization (RS256 by the App's key, iss the App id,
  # exp - iat <= 600, iat not ahead, exp not past), else nil. As GitHub checks them.
  def app_jwt(req)
    token = req["Authorization"].to_s[/\ABearer ([\w-]+\.[\w-]+\.[\w-]+)\z/, 1] or return nil
    h, c, s = token.split(".")
    return nil unless JSON.parse(Base64.urlsafe_decode64(h)) == { "alg" => "RS256", "typ" => "JWT" } &&
                      @github_app[:public_key].verify("SHA256", Base64.urlsafe_decode64(s), "#{h}.#{c}")

    claims = JSON.parse(Base64.urlsafe_decode64(c))
    iat, exp, now = claims["iat"], claims["exp"], Time.now.to_i
    return nil unless claims["iss"].to_s == @github_app[:id].to_s && iat.is_a?(Integer) && exp.is_a?(Integer) &&
                      exp - iat <= 600 && iat <= now + 60 && exp > now

    @lock.synchronize { @app_claims << claims }
  rescue ArgumentError, JSON::ParserError, OpenSSL::PKey::PKeyError
    nil
  end

  def github_auth?(req, app)
    app ? @github_app && app_jwt(req) : bearer?(req, @github_token)
  end

  def github_list(req, r, res, fault, app: false)
    unless github_auth?(req, app)
      return unauthorized(res, app ? "A JSON web token could not be decoded" : "Bad credentials")
    end

    per_page = Integer(r.params.fetch("per_page", "30")).clamp(1, 100)
    # a cursor stands for a position (the last id shown), stable while attempts are added
    before = r.params["cursor"] ? Integer(r.params["cursor"].delete_prefix("v1_")) : Float::INFINITY
    apps = @lock.synchronize { @app_ids.dup }
    rest = deliveries.select { |d| d["id"] < before && apps.key?(d["id"]) == app }.sort_by { |d| -d["id"] }
    page = rest.first(per_page)
    if rest.size > per_page
      res["Link"] = "<#{url}#{req.path}?per_page=#{per_page}&cursor=v1_#{page.last["id"]}>; rel=\"next\""
    end
    send_body(res, JSON.generate(page), fault)
  end

  def github_redeliver(req, id, res, app: false)
    return unauthorized(res, "Bad credentials") unless github_auth?(req, app)

    original = deliveries.find { |d| d["id"] == id }
    return (res.status = 404) unless original && @lock.synchronize { @app_ids.key?(id) } == app

    body, headers = @lock.synchronize { @payloads[id] }
    status = deliver ? deliver.call(body, headers) : 502
    add_delivery(guid: original["guid"], event: original["event"], body: body, headers: headers,
                 status_code: status, delivered_at: Time.now, redelivery: true, app: app)
    res.status = 202
    res.body = "{}"
  end
end
