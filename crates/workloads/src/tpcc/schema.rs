//! The TPC-C tables (spec clause 1.3) and the two index tables that stand in for secondary
//! indexes. Every per-warehouse table's primary key starts with the warehouse id and is
//! partitioned by it (`KeyPrefix { prefix_len: 1 }`: warehouse `w` lives on partition
//! `w mod P`); ITEM is replicated to every partition. Primary-key columns come first in every
//! table, in key order (the checker's chunked scans rely on it). Money is `Decimal`, dates are
//! `Int` seconds.

use litmus_core::{Catalog, Column, ColumnType, Partitioning, TableSchema};

pub const WAREHOUSE: &str = "tpcc_warehouse";
pub const DISTRICT: &str = "tpcc_district";
pub const CUSTOMER: &str = "tpcc_customer";
/// Index: customers by `(w, d, c_last, c_first, c_id)` (Payment and Order-Status by last name).
pub const CUSTOMER_NAME: &str = "tpcc_customer_name";
pub const HISTORY: &str = "tpcc_history";
pub const NEW_ORDER: &str = "tpcc_new_order";
pub const ORDERS: &str = "tpcc_orders";
/// Index: a customer's latest order id `(w, d, c) -> o_id` (Order-Status).
pub const CUSTOMER_LAST_ORDER: &str = "tpcc_customer_last_order";
pub const ORDER_LINE: &str = "tpcc_order_line";
pub const ITEM: &str = "tpcc_item";
pub const STOCK: &str = "tpcc_stock";

/// Column positions (rows are built and read positionally).
pub mod col {
    // warehouse(w_id, w_name, w_street_1, w_street_2, w_city, w_state, w_zip, w_tax, w_ytd)
    pub const W_NAME: usize = 1;
    pub const W_TAX: usize = 7;
    pub const W_YTD: usize = 8;
    // district(d_w_id, d_id, d_name, d_street_1, d_street_2, d_city, d_state, d_zip, d_tax, d_ytd, d_next_o_id)
    pub const D_NAME: usize = 2;
    pub const D_TAX: usize = 8;
    pub const D_YTD: usize = 9;
    pub const D_NEXT_O_ID: usize = 10;
    // customer(c_w_id, c_d_id, c_id, c_first, c_middle, c_last, c_street_1, c_street_2, c_city,
    //          c_state, c_zip, c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance,
    //          c_ytd_payment, c_payment_cnt, c_delivery_cnt, c_data)
    pub const C_ID: usize = 2;
    pub const C_FIRST: usize = 3;
    pub const C_LAST: usize = 5;
    pub const C_CREDIT: usize = 13;
    pub const C_DISCOUNT: usize = 15;
    pub const C_BALANCE: usize = 16;
    pub const C_YTD_PAYMENT: usize = 17;
    pub const C_DATA: usize = 20;
    // customer_name(cn_w_id, cn_d_id, cn_last, cn_first, cn_c_id)
    pub const CN_C_ID: usize = 4;
    // history(h_c_w_id, h_c_d_id, h_c_id, h_id, h_w_id, h_d_id, h_date, h_amount, h_data)
    pub const H_C_ID: usize = 2;
    pub const H_W_ID: usize = 4;
    pub const H_D_ID: usize = 5;
    pub const H_AMOUNT: usize = 7;
    // new_order(no_w_id, no_d_id, no_o_id)
    pub const NO_O_ID: usize = 2;
    // orders(o_w_id, o_d_id, o_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local)
    pub const O_ID: usize = 2;
    pub const O_C_ID: usize = 3;
    pub const O_CARRIER_ID: usize = 5;
    pub const O_OL_CNT: usize = 6;
    // customer_last_order(clo_w_id, clo_d_id, clo_c_id, clo_o_id)
    pub const CLO_O_ID: usize = 3;
    // order_line(ol_w_id, ol_d_id, ol_o_id, ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d,
    //            ol_quantity, ol_amount, ol_dist_info)
    pub const OL_O_ID: usize = 2;
    pub const OL_NUMBER: usize = 3;
    pub const OL_I_ID: usize = 4;
    pub const OL_DELIVERY_D: usize = 6;
    pub const OL_AMOUNT: usize = 8;
    // item(i_id, i_im_id, i_name, i_price, i_data)
    pub const I_NAME: usize = 2;
    pub const I_PRICE: usize = 3;
    pub const I_DATA: usize = 4;
    // stock(s_w_id, s_i_id, s_quantity, s_dist_01..s_dist_10, s_ytd, s_order_cnt, s_remote_cnt, s_data)
    pub const S_QUANTITY: usize = 2;
    /// `s_dist_{d}` for district `d` in 1..=10.
    pub const fn s_dist(d: usize) -> usize {
        2 + d
    }
    pub const S_DATA: usize = 16;
}

fn int(name: &str) -> Column {
    Column::new(name, ColumnType::Int)
}
fn dec(name: &str) -> Column {
    Column::new(name, ColumnType::Decimal)
}
fn text(name: &str) -> Column {
    Column::new(name, ColumnType::String)
}

fn per_warehouse(name: &str, columns: Vec<Column>, key: &[&str]) -> TableSchema {
    TableSchema::new(name, columns, key, Partitioning::KeyPrefix { prefix_len: 1 })
}

fn address(prefix: &str) -> Vec<Column> {
    ["street_1", "street_2", "city", "state", "zip"].iter().map(|f| text(&format!("{prefix}_{f}"))).collect()
}

/// The eleven tables.
pub fn catalog() -> Catalog {
    let mut c = Catalog::new();
    let mut w = vec![int("w_id"), text("w_name")];
    w.extend(address("w"));
    w.extend([dec("w_tax"), dec("w_ytd")]);
    c.add(per_warehouse(WAREHOUSE, w, &["w_id"]));

    let mut d = vec![int("d_w_id"), int("d_id"), text("d_name")];
    d.extend(address("d"));
    d.extend([dec("d_tax"), dec("d_ytd"), int("d_next_o_id")]);
    c.add(per_warehouse(DISTRICT, d, &["d_w_id", "d_id"]));

    let mut cu = vec![int("c_w_id"), int("c_d_id"), int("c_id"), text("c_first"), text("c_middle"), text("c_last")];
    cu.extend(address("c"));
    cu.extend([
        text("c_phone"),
        int("c_since"),
        text("c_credit"),
        dec("c_credit_lim"),
        dec("c_discount"),
        dec("c_balance"),
        dec("c_ytd_payment"),
        int("c_payment_cnt"),
        int("c_delivery_cnt"),
        text("c_data"),
    ]);
    c.add(per_warehouse(CUSTOMER, cu, &["c_w_id", "c_d_id", "c_id"]));

    let cn = vec![int("cn_w_id"), int("cn_d_id"), text("cn_last"), text("cn_first"), int("cn_c_id")];
    c.add(per_warehouse(CUSTOMER_NAME, cn, &["cn_w_id", "cn_d_id", "cn_last", "cn_first", "cn_c_id"]));

    let h = vec![
        int("h_c_w_id"),
        int("h_c_d_id"),
        int("h_c_id"),
        int("h_id"),
        int("h_w_id"),
        int("h_d_id"),
        int("h_date"),
        dec("h_amount"),
        text("h_data"),
    ];
    c.add(per_warehouse(HISTORY, h, &["h_c_w_id", "h_c_d_id", "h_c_id", "h_id"]));

    c.add(per_warehouse(
        NEW_ORDER,
        vec![int("no_w_id"), int("no_d_id"), int("no_o_id")],
        &["no_w_id", "no_d_id", "no_o_id"],
    ));

    let o = vec![
        int("o_w_id"),
        int("o_d_id"),
        int("o_id"),
        int("o_c_id"),
        int("o_entry_d"),
        Column::nullable("o_carrier_id", ColumnType::Int),
        int("o_ol_cnt"),
        int("o_all_local"),
    ];
    c.add(per_warehouse(ORDERS, o, &["o_w_id", "o_d_id", "o_id"]));

    let clo = vec![int("clo_w_id"), int("clo_d_id"), int("clo_c_id"), int("clo_o_id")];
    c.add(per_warehouse(CUSTOMER_LAST_ORDER, clo, &["clo_w_id", "clo_d_id", "clo_c_id"]));

    let ol = vec![
        int("ol_w_id"),
        int("ol_d_id"),
        int("ol_o_id"),
        int("ol_number"),
        int("ol_i_id"),
        int("ol_supply_w_id"),
        Column::nullable("ol_delivery_d", ColumnType::Int),
        int("ol_quantity"),
        dec("ol_amount"),
        text("ol_dist_info"),
    ];
    c.add(per_warehouse(ORDER_LINE, ol, &["ol_w_id", "ol_d_id", "ol_o_id", "ol_number"]));

    let item = vec![int("i_id"), int("i_im_id"), text("i_name"), dec("i_price"), text("i_data")];
    c.add(TableSchema::new(ITEM, item, &["i_id"], Partitioning::Replicated));

    let mut s = vec![int("s_w_id"), int("s_i_id"), int("s_quantity")];
    s.extend((1..=10).map(|d| text(&format!("s_dist_{d:02}"))));
    s.extend([int("s_ytd"), int("s_order_cnt"), int("s_remote_cnt"), text("s_data")]);
    c.add(per_warehouse(STOCK, s, &["s_w_id", "s_i_id"]));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_positions_match_the_schema() {
        let c = catalog();
        let pos = |t: &str, name: &str| c.table_by_name(t).unwrap().column(name).unwrap();
        assert_eq!(pos(WAREHOUSE, "w_ytd"), col::W_YTD);
        assert_eq!(pos(WAREHOUSE, "w_tax"), col::W_TAX);
        assert_eq!(pos(DISTRICT, "d_next_o_id"), col::D_NEXT_O_ID);
        assert_eq!(pos(DISTRICT, "d_ytd"), col::D_YTD);
        assert_eq!(pos(CUSTOMER, "c_data"), col::C_DATA);
        assert_eq!(pos(CUSTOMER, "c_balance"), col::C_BALANCE);
        assert_eq!(pos(CUSTOMER, "c_credit"), col::C_CREDIT);
        assert_eq!(pos(HISTORY, "h_amount"), col::H_AMOUNT);
        assert_eq!(pos(ORDERS, "o_ol_cnt"), col::O_OL_CNT);
        assert_eq!(pos(ORDER_LINE, "ol_amount"), col::OL_AMOUNT);
        assert_eq!(pos(ORDER_LINE, "ol_delivery_d"), col::OL_DELIVERY_D);
        assert_eq!(pos(STOCK, "s_dist_10"), col::s_dist(10));
        assert_eq!(pos(STOCK, "s_data"), col::S_DATA);
        assert_eq!(pos(ITEM, "i_data"), col::I_DATA);
        assert_eq!(c.tables().count(), 11);
    }
}
