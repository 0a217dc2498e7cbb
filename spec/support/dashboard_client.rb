# frozen_string_literal: true

require "net/http"
require "uri"

# DashboardClient - a browser-like HTTP client for the dashboard specs: basic auth, a cookie
# jar (the engine's session holds the CSRF secret), and the CSRF token of the last page.
class DashboardClient
  attr_reader :last_body
  attr_accessor :port # another server with the same secret_key_base takes this client's session

  def initialize(port, user: nil, password: nil)
    @port = port
    @auth = user && "Basic #{["#{user}:#{password}"].pack('m0')}"
    @cookies = {}
  end

  # [status, headers, body]
  def get(path)
    request(Net::HTTP::Get.new(path))
  end

  # form: Hash; token: true sends the CSRF token of the last page fetched.
  def post(path, form = {}, token: true)
    req = Net::HTTP::Post.new(path)
    form = form.merge("authenticity_token" => csrf_token) if token
    req.set_form_data(form)
    request(req)
  end

  def csrf_token
    @last_body.to_s[/<meta name="csrf-token" content="([^"]+)"/, 1] or raise "no CSRF token on the last page"
  end

  private

  def request(req)
    req["Authorization"] = @auth if @auth
    req["Cookie"] = @cookies.map { |k, v| "#{k}=#{v}" }.join("; ") unless @cookies.empty?
    res = Net::HTTP.start("127.0.0.1", @port, read_timeout: 30) { |http| http.request(req) }
    Array(res.get_fields("set-cookie")).each do |c|
      name, value = c.split(";", 2).first.split("=", 2)
      @cookies[name] = value
    end
    @last_body = res.body.to_s.dup.force_encoding(Encoding::UTF_8)
    [res.code.to_i, res.each_header.to_h, @last_body]
  end
end
