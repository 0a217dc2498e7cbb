# frozen_string_literal: true

# include_cycles.rb [SRC_DIR] - fails (exit 1) when the sidecar's modules include each other
# in a circle. A module is a .c and its .h (or a header alone); module A depends on B when
# A's .c or .h includes B's header. Any strongly connected set of two or more modules (a
# file that, through any chain of includes, includes its own includer) is printed with the
# include lines that close it. Includes resolve like the compiler's quote form: the including
# file's folder first, then SRC_DIR (default sidecar/src); others (system, ext/) are ignored.
src = File.expand_path(ARGV.fetch(0, File.join(__dir__, "..", "src")))
abort "include_cycles: no such directory #{src}" unless File.directory?(src)

files = Dir.glob("**/*.{c,h}", base: src).sort
abort "include_cycles: no C sources under #{src}" if files.empty?
module_of = ->(path) { path.sub(/\.[ch]\z/, "") }

edges = Hash.new { |h, k| h[k] = {} } # module => {module => "file:line includes header"}
files.each do |file|
  from = module_of.(file)
  edges[from]
  File.foreach(File.join(src, file)).with_index(1) do |line, no|
    next unless (name = line[/\A\s*#\s*include\s+"([^"]+)"/, 1])

    header = [File.join(File.dirname(file), name), name].map { |p| File.expand_path(p, "/").delete_prefix("/") }
                                                        .find { |p| File.file?(File.join(src, p)) }
    next unless header

    to = module_of.(header)
    edges[from][to] ||= "#{file}:#{no} includes #{header}" unless to == from
  end
end

# Tarjan's strongly connected components, iteratively (no recursion limit to mind).
index = {}
low = {}
stack = []
on_stack = {}
cycles = []
counter = 0
edges.each_key do |root|
  next if index[root]

  work = [[root, edges[root].keys, 0]]
  index[root] = low[root] = counter
  counter += 1
  stack << root
  on_stack[root] = true
  until work.empty?
    node, succ, i = work.last
    if i < succ.size
      work.last[2] += 1
      w = succ[i]
      if !index[w]
        index[w] = low[w] = counter
        counter += 1
        stack << w
        on_stack[w] = true
        work << [w, edges[w].keys, 0]
      elsif on_stack[w]
        low[node] = [low[node], index[w]].min
      end
    else
      work.pop
      low[work.last[0]] = [low[work.last[0]], low[node]].min unless work.empty?
      next unless low[node] == index[node]

      component = []
      loop do
        w = stack.pop
        on_stack[w] = false
        component << w
        break if w == node
      end
      cycles << component.sort if component.size > 1
    end
  end
end

if cycles.empty?
  puts "include_cycles: #{edges.size} modules under #{File.basename(src)}/, no include cycle"
  exit 0
end
cycles.each do |component|
  warn "include cycle among #{component.join(', ')}:"
  component.each do |m|
    edges[m].each { |to, why| warn "  #{why}" if component.include?(to) }
  end
end
warn "include_cycles: #{cycles.size} cycle(s); break each with a forward declaration or a small header of its own"
exit 1
