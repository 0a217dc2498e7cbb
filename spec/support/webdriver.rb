# frozen_string_literal: true

require "json"
require "net/http"
require "socket"
require "tmpdir"

# WebDriver - Debian's headless Chromium driven through chromedriver's W3C WebDriver HTTP
# API with Net::HTTP (no gem): enough for the dashboard's browser spec (visit, find, click,
# text). Raises when chromium or chromedriver is missing (bin/setup installs them).
class WebDriver
  ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
  CHROMIUM = ENV.fetch("CHROMIUM", "/usr/bin/chromium")
  CHROMEDRIVER = ENV.fetch("CHROMEDRIVER", "/usr/bin/chromedriver")
  IMPLICIT_WAIT_MS = 15_000

  def self.available?
    File.executable?(CHROMIUM) && File.executable?(CHROMEDRIVER)
  end

  def initialize
    @port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    @log = File.join(Dir.tmpdir, "wi-chromedriver-#{@port}.log")
    @pid = Process.spawn(CHROMEDRIVER, "--port=#{@port}", out: [@log, "a"], err: [@log, "a"])
    wait_ready
    @profile = Dir.mktmpdir("wi-chromium-")
    caps = { "capabilities" => { "alwaysMatch" => {
      "browserName" => "chrome",
      "goog:chromeOptions" => { "binary" => CHROMIUM,
                                "args" => ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                           "--user-data-dir=#{@profile}", "--window-size=1280,900"] }
    } } }
    @session = call(:post, "/session", caps).fetch("sessionId")
    # A click that submits a form can return before the next page has loaded: finding an
    # element waits up to this long for it to appear instead of failing at once.
    call(:post, "/session/#{@session}/timeouts", { "implicit" => IMPLICIT_WAIT_MS })
  end

  def visit(url)
    call(:post, "/session/#{@session}/url", { "url" => url })
  end

  # The first element matching a CSS selector, waiting for it up to IMPLICIT_WAIT_MS;
  # raises naming the page it was looking at.
  def find(css)
    call(:post, "/session/#{@session}/element", { "using" => "css selector", "value" => css }).fetch(ELEMENT)
  rescue RuntimeError => e
    raise unless e.message.include?("no such element")

    raise "#{e.message.lines.first.strip} (page: #{current_url}, title: #{call(:get, "/session/#{@session}/title").inspect})"
  end

  def click(css)
    call(:post, "/session/#{@session}/element/#{find(css)}/click", {})
  end

  # The element's text; found again when the page was replaced between find and read.
  def text(css)
    tries = 0
    begin
      call(:get, "/session/#{@session}/element/#{find(css)}/text")
    rescue RuntimeError => e
      raise unless e.message.include?("stale element reference") && (tries += 1) < 5

      retry
    end
  end

  def source
    call(:get, "/session/#{@session}/source")
  end

  def current_url
    call(:get, "/session/#{@session}/url")
  end

  def quit
    call(:delete, "/session/#{@session}") if @session
  rescue StandardError
    nil
  ensure
    if @pid
      Process.kill("TERM", @pid)
      Process.wait(@pid)
    end
    FileUtils.rm_rf(@profile) if @profile
  end

  private

  def wait_ready
    deadline = Time.now + 20
    begin
      call(:get, "/status")
    rescue Errno::ECONNREFUSED
      raise "chromedriver did not start: #{File.read(@log)}" if Time.now > deadline

      sleep 0.1
      retry
    end
  end

  # One WebDriver command; returns its "value", raises on a WebDriver error.
  def call(verb, path, body = nil)
    req = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.fetch(verb).new(path)
    if body
      req["Content-Type"] = "application/json"
      req.body = JSON.generate(body)
    end
    res = Net::HTTP.start("127.0.0.1", @port, read_timeout: 60) { |h| h.request(req) }
    value = JSON.parse(res.body)["value"]
    raise "WebDriver #{verb} #{path}: #{value['error']}: #{value['message']}" if value.is_a?(Hash) && value["error"]

    value
  end
end
