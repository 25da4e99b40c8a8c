"""The dashboard's pages: scripts that app.py hands to st.navigation (a package so the wheel ships them)."""
