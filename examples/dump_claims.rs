fn main() {
    for c in llm_anatomy::claims::all() {
        println!(
            "{} [{}] {:?}\n   {}\n",
            c.id,
            c.status.as_str(),
            c.value,
            c.computed
        );
    }
}
