# frozen_string_literal: true

# A normal web request of the app (bench/peers/drain): one indexed read, rendered as JSON.
class OrdersController < ActionController::API
  def show
    order = Order.find_by!(tenant_id: params[:tenant_id], order_id: params[:id])
    render json: order.slice(:tenant_id, :order_id, :status, :amount, :currency, :paid_at)
  end
end
