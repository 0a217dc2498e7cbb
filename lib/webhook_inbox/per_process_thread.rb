# frozen_string_literal: true

module WebhookInbox
  # PerProcessThread - the one background thread of an object that buffers in memory and
  # writes in the background (Rejections, Refused): started on first use, and again in a
  # forked child, which first drops its copy of the parent's buffer (the parent writes that).
  # The includer sets @mutex, @thread = nil and @pid = Process.pid, defines forget_inherited
  # (called holding @mutex), and starts the thread before it buffers anything.
  module PerProcessThread
    private

    # Starts the thread running body in a loop, named name, unless this process has it.
    def start_per_process_thread(name, &body)
      return if @thread&.alive? && @pid == Process.pid

      @mutex.synchronize do
        return if @thread&.alive? && @pid == Process.pid

        forget_inherited if @pid != Process.pid
        @pid = Process.pid
        @thread = Thread.new do
          Thread.current.name = name
          loop(&body)
        end
      end
    end
  end
end
