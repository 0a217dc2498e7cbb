# frozen_string_literal: true

# Puma serves the app (bench/peers/drain): puma -t 5:5 config.ru
require_relative "config/environment"
run Rails.application
