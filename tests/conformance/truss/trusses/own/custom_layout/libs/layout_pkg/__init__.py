VALUE = "from-libs"
