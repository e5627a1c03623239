"""Writers: spreadsheets, plots, tables. Each format in its own module."""
